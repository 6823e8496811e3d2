"""The OpenAI Responses API (`POST /v1/responses`) as pure functions: bodies out, bodies in.

Requests are stateless (`store: false`): every call carries the whole history, and reasoning
items travel back verbatim (with their `encrypted_content`) beside the function calls they led to.
Function-call items have two ids: `call_id`, which results quote and which becomes
`ToolCall.id`, and the item's own `fc_…` id, which rides along in `provider_data`.
Decoding (bodies and stream events) lives in `_openai_responses_decode`.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

import copy
import json
from collections.abc import Iterable
from typing import Any

from turnstile.core import (
    AssistantMessage,
    Message,
    ModelRequest,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    ToolSpec,
    UserMessage,
)

from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._openai_responses_decode import StreamAccumulator, decode
from ._wire import json_object


def encode(
    request: ModelRequest, *, model: str, cache: WireCache | None = None, **options: Any
) -> dict[str, Any]:
    """The JSON body for `POST /v1/responses`.

    Defaults: `store: false` and `include: ["reasoning.encrypted_content"]`, so reasoning can be
    sent back without server-side state; tools go with `strict: false`, because the API otherwise
    rewrites their schemas into strict mode (every field required). `options` are merged over the
    body (`stream=True`, `reasoning={"effort": "low"}`, ...); an option set to None removes that
    key, e.g. `include=None` for a model that rejects encrypted reasoning (gpt-4o, gpt-4.1).

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    items of `input` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.
    """
    body: dict[str, Any] = {"model": model}
    if request.system is not None:
        body["instructions"] = request.system
    body["input"] = folded(_fold, request.messages, cache)
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    body["max_output_tokens"] = request.max_tokens
    body["store"] = False
    body["include"] = ["reasoning.encrypted_content"]
    for key, value in options.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = spec.parameters
    tool["strict"] = False
    return tool


def _fold(items: list[dict[str, Any]], messages: Iterable[Message]) -> None:
    for message in messages:
        match message:
            case UserMessage(content=content):
                items.append({"type": "message", "role": "user", "content": content})
            case AssistantMessage(content=parts):
                _assistant(parts, items)
            case ToolResults(results=results):
                items.extend(
                    {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
                    for r in results
                )


def _assistant(parts: list[Part], items: list[dict[str, Any]]) -> None:
    """A reply's parts as input items, in order; adjacent texts share one message item.

    Thinking without a reasoning item in `provider_data` (another provider's) has no form here
    and is left out.
    """
    texts: list[dict[str, Any]] = []
    for part in parts:
        if type(part) is Text:
            if part.text:
                texts.append({"type": "output_text", "text": part.text})
            continue
        if texts:
            items.append({"type": "message", "role": "assistant", "content": texts})
            texts = []
        if type(part) is Thinking:
            data = part.provider_data
            if isinstance(data, dict) and data.get("type") == "reasoning":
                items.append(copy.deepcopy(data))
        elif type(part) is ToolCall:
            items.append(_function_call(part))
    if texts:
        items.append({"type": "message", "role": "assistant", "content": texts})


def _function_call(call: ToolCall) -> dict[str, Any]:
    kept = copy.deepcopy(call.provider_data) if isinstance(call.provider_data, dict) else {}
    item: dict[str, Any] = {"type": "function_call", **kept}
    item["call_id"] = call.id
    item["name"] = call.name
    item["arguments"] = _arguments_text(call, kept.get("arguments"))
    return item


def _arguments_text(call: ToolCall, kept: Any) -> str:
    """The arguments as the model wrote them while still true to `call`, else re-serialized."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    if isinstance(kept, str) and (json_object(kept) if kept.strip() else {}) == call.arguments:
        return kept
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, **options)`; see
    `WireClient`."""

    wire = Wire("openai", "/responses", "gpt-5.1", encode, decode, StreamAccumulator)
