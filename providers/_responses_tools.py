"""What an OpenAI Responses request asks besides the conversation, as `openai_responses.encode`
writes it: the `tools` (the request's own, and this format's server tools where they stand: after
them, or at their `position`), `tool_choice`, and the answer's shape (`text.format`).

A tool's `strict` is its `ToolSpec.strict`, false when None: left out, the API would rewrite the
schema into strict mode (every field required), so None means here what it means in the other
formats. A strict schema (a tool's, or the answer's) has `additionalProperties: false` added to
each object that does not say, the one value strict mode takes. A deferred tool
(`ToolSpec.defer_loading`) says `defer_loading: true`, for the `tool_search` tool (a server tool)
to load.
"""

from __future__ import annotations

__all__ = ["text_format", "tool_choice", "tools"]

from typing import Any

from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.request import OutputFormat, ToolChoice, UseTool

from ._responses_items import FORMAT
from ._server_tools import placed

# Schema keywords whose values are JSON values, not schemas: `_closed` leaves them as they are.
_VALUES = frozenset({"const", "default", "enum", "examples"})


def tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's tools, and its server tools of this format as written, where they stand."""
    return placed([_tool(spec) for spec in request.tools], request.server_tools, FORMAT)


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    strict = bool(spec.strict)
    parameters = _closed(spec.parameters) if strict else spec.parameters
    tool = {**tool, "parameters": parameters, "strict": strict}
    return {**tool, "defer_loading": True} if spec.defer_loading else tool


def tool_choice(choice: ToolChoice) -> str | dict[str, str]:
    return {"type": "function", "name": choice.name} if isinstance(choice, UseTool) else choice


def text_format(output: OutputFormat) -> dict[str, Any]:
    schema = _closed(output.schema) if output.strict else output.schema
    return {"type": "json_schema", "name": output.name, "schema": schema, "strict": output.strict}


def _closed(schema: Any) -> Any:
    """A copy of `schema` where every object schema that does not say whether it takes other
    members says it does not (`additionalProperties: false`)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: v if k in _VALUES else _closed(v) for k, v in schema.items()}
    kind = schema.get("type")
    if (kind == "object" or (isinstance(kind, list) and "object" in kind)) and (
        "additionalProperties" not in schema
    ):
        closed["additionalProperties"] = False
    return closed
