"""Messages API requests: a neutral `ModelRequest` as the body of POST /v1/messages."""

from __future__ import annotations

__all__ = ["STRING_REPLY", "assistant_block", "encode", "tool_definition"]

from collections.abc import Iterable, Sequence
from typing import Any

from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Instructions,
    Message,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy, ToolChoice, UseTool
from turnstile.providers._cache import WireCache, folded
from turnstile.providers._errors import UnsupportedContent
from turnstile.providers._server_tools import placed

from ._blocks import (
    FORMAT,
    citations_of,
    content_blocks,
    opaque,
    tool_result,
)

_ANY_OBJECT = {"type": "object"}
STRING_REPLY = {"string": True}
"""A reply's text part marked to go back as a message's whole content, a string (as a request
read back by `decode_request` had it), when caching leaves text content alone."""


def encode(
    request: ModelRequest, *, model: str, cache: WireCache | None = None, **options: Any
) -> dict[str, Any]:
    """The JSON body of POST /v1/messages for `request`.

    `options` (temperature, stream=True, tool_choice, metadata, thinking, ...) are merged in last
    and win, except where the request decides: a `tool_choice` other than "auto" (required ->
    any, none, `UseTool` -> tool; a client-wide `disable_parallel_tool_use` is kept) and
    `output` (`output_config.format`, json_schema, beside the options' own `output_config`).
    Parts the API would reject are left out: blank text, thinking without a signature (it cannot
    be verified), redacted thinking without its data; an assistant message left empty is dropped
    and its neighbours, both user messages then, become one.

    User messages and tool results map each part to its block: text, images (base64, URL, Files
    API; jpeg/png/gif/webp), documents (base64 PDF, plain text, URL, Files API; the title, or
    else the file name, as `title`), `Opaque` blocks of this format verbatim. `Instructions` are a
    `{"role": "system"}` message, which the API takes only right after a user turn (Claude Opus
    4.8 and later). Audio, other media types, another format's blocks and misplaced instructions
    raise `UnsupportedContent`. A prompt ending on an assistant text is a prefill. A reply's
    `Opaque` blocks and its text's citations go back as they came. `ToolSpec.strict` is written
    when set; `server_tools` of this format join `tools` verbatim.

    With `request.cache`, breakpoints (`cache_control`, `ttl` "1h" when asked) mark the last
    tool, the system prompt (then a list of one text block) and two messages: the newest, and
    the one the previous request ended on (see `_breakpoints`); 4 at most, the API's limit. Text
    content is then always a list of blocks, so a message reads the same with or without a
    breakpoint and each request repeats the previous one's cached prefix byte for byte. An
    `Opaque` block sent with its own `cache_control` counts towards the API's 4.

    Extended thinking (`thinking` of type "enabled") is sent `{"type": "disabled"}` while the
    current assistant turn (since the last user message) began with a tool call and no signed
    thinking, as a turn another model began does: the API keeps one thinking configuration per
    turn (a tool-use loop is one turn) and refuses such a turn with thinking on; the next user
    turn has it on again. Adaptive thinking is left as asked: under it Claude may open a turn
    without thinking itself, so such a turn is one the API takes.

    A request without tools whose history holds tool calls (the loop's finalize request) declares
    the tools those calls named, with an open schema and `tool_choice: none`: the API has
    rejected tool_use/tool_result blocks in requests that define no tools ("Requests which
    include `tool_use` or `tool_result` blocks must define tools"), and this way the history keeps
    its structure (ids, thinking signatures) while no tool can be called.

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    entries of `messages` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.
    """
    mark = _mark(request.cache)
    body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens}
    if request.system is not None:
        body["system"] = request.system
        if mark is not None and request.system.strip():
            body["system"] = [{"type": "text", "text": request.system, "cache_control": mark}]
    if mark is None:
        body["messages"] = folded(_fold, request.messages, cache)
    else:
        body["messages"] = _breakpoints(folded(_fold_blocks, request.messages, cache), mark)
    tools = placed([tool_definition(spec) for spec in request.tools], request.server_tools, FORMAT)
    if tools:
        body["tools"] = tools
    else:
        used = _tools_called(request.messages)
        if used:
            body["tools"] = [{"name": name, "input_schema": dict(_ANY_OBJECT)} for name in used]
            body["tool_choice"] = {"type": "none"}
    if mark is not None and "tools" in body:  # on the last tool in the prefix: deferred ones
        loaded = [i for i, t in enumerate(body["tools"]) if not t.get("defer_loading")]
        if loaded:  # are not in it (tool search appends them to the history when it finds them)
            body["tools"][loaded[-1]] = {**body["tools"][loaded[-1]], "cache_control": mark}
    body.update(options)
    thinking = body.get("thinking")
    if (
        isinstance(thinking, dict)
        and thinking.get("type") == "enabled"
        and _begun_unthinking(request.messages)
    ):
        body["thinking"] = {"type": "disabled"}
    if "tools" in body and request.tool_choice != "auto":
        body["tool_choice"] = _tool_choice(request.tool_choice, options.get("tool_choice"))
    if request.output is not None:
        shape = {"type": "json_schema", "schema": request.output.schema}
        body["output_config"] = {**options.get("output_config", {}), "format": shape}
    return body


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["input_schema"] = spec.parameters
    if spec.strict is not None:
        tool["strict"] = spec.strict
    if spec.defer_loading:
        tool["defer_loading"] = True
    return tool


def _tool_choice(choice: ToolChoice, given: Any) -> dict[str, Any]:
    """The loop's choice, keeping a client-wide `disable_parallel_tool_use` where it applies."""
    if choice == "none":
        return {"type": "none"}
    wire = {"type": "tool", "name": choice.name} if isinstance(choice, UseTool) else {"type": "any"}
    if isinstance(given, dict) and "disable_parallel_tool_use" in given:
        wire["disable_parallel_tool_use"] = given["disable_parallel_tool_use"]
    return wire


def _mark(policy: CachePolicy | None) -> dict[str, str] | None:
    if policy is None or not policy.enabled:
        return None
    return {"type": "ephemeral", "ttl": "1h"} if policy.ttl == "1h" else {"type": "ephemeral"}


def _breakpoints(wire: list[dict[str, Any]], mark: dict[str, str]) -> list[dict[str, Any]]:
    """`wire` (a new list, its entries shared) with breakpoints at the end of the newest message
    and of the message the previous request ended on (the one before the newest reply): the
    API finds a cached prefix only at a breakpoint or up to 20 blocks before one, and a turn may
    add more, so the previous end keeps its own. Marked entries are copies."""
    newest = len(wire) - 1
    reply = next((i for i in range(newest, -1, -1) if wire[i]["role"] == "assistant"), 0)
    for i in {newest, reply - 1} - {-1}:
        wire[i] = _marked(wire[i], mark)
    return wire


_CACHEABLE = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
"""The blocks whose types (in the SDK's params) take a `cache_control`; thinking blocks don't."""


def _marked(message: dict[str, Any], mark: dict[str, str]) -> dict[str, Any]:
    """A copy of `message` with a breakpoint on its last block that can hold one."""
    content = message["content"]
    for j in range(len(content) - 1, -1, -1):
        if content[j].get("type") in _CACHEABLE:
            block = {**content[j], "cache_control": mark}
            return {**message, "content": [*content[:j], block, *content[j + 1 :]]}
    return message


def _begun_unthinking(history: Sequence[Message]) -> bool:
    """The current assistant turn's first reply calls a tool and opens with no thinking block."""
    first: AssistantMessage | None = None
    for message in reversed(history):
        if type(message) is UserMessage:
            break
        if type(message) is AssistantMessage:
            first = message
    if first is None or not any(type(p) is ToolCall for p in first.content):
        return False
    opening = next((b for b in map(assistant_block, first.content) if b is not None), None)
    return opening is None or opening["type"] not in ("thinking", "redacted_thinking")


def _tools_called(history: Sequence[Message]) -> list[str]:
    names: dict[str, None] = {}
    for message in history:
        if type(message) is AssistantMessage:
            names.update((p.name, None) for p in message.content if type(p) is ToolCall)
    return list(names)


def _fold(wire: list[dict[str, Any]], history: Iterable[Message], blocks: bool = False) -> None:
    """Append `history` to `wire`; with `blocks`, text content as a list of blocks (caching's
    form, so a message reads the same whether or not it holds a breakpoint)."""
    for message in history:
        match message:
            case UserMessage(content=str() as text):
                _append(wire, "user", _as_blocks(text) if blocks else text)
            case UserMessage(content=list() as shown):
                _append(wire, "user", content_blocks(shown))
            case AssistantMessage(content=[Text() as whole]) if (
                not blocks and whole.provider_data == STRING_REPLY
            ):
                _append(wire, "assistant", whole.text)
            case AssistantMessage(content=parts):
                said = [b for b in map(assistant_block, parts) if b is not None]
                if said:
                    _append(wire, "assistant", said)
            case ToolResults(results=results):
                _append(wire, "user", [tool_result(r) for r in results])
            case Instructions(text=text):
                if not wire or wire[-1]["role"] != "user":
                    raise UnsupportedContent(FORMAT, "instructions that do not follow a user turn")
                _append(wire, "system", _as_blocks(text) if blocks else text)
            case _:
                raise TypeError(f"not a message: {message!r}")


def _fold_blocks(wire: list[dict[str, Any]], history: Iterable[Message]) -> None:
    _fold(wire, history, blocks=True)


def _append(wire: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    """Add a message, merging it with the previous one when both have the same role; the merged
    message is a new entry, since the previous one may already be in a body (see `_cache`)."""
    if wire and wire[-1]["role"] == role:
        wire[-1] = {"role": role, "content": _as_blocks(wire[-1]["content"]) + _as_blocks(content)}
    else:
        wire.append({"role": role, "content": content})


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def assistant_block(part: Part) -> dict[str, Any] | None:
    match part:
        case Text(text=text) if text.strip():
            citations = citations_of(part)
            return {"type": "text", "text": text, **({"citations": citations} if citations else {})}
        case Thinking(redacted=True):
            data = _redacted_data(part)
            return {"type": "redacted_thinking", "data": data} if data else None
        case Thinking(text=text, signature=str() as signature) if signature:
            return {"type": "thinking", "thinking": text, "signature": signature}
        case ToolCall(id=call_id, name=name, arguments=arguments):
            return {"type": "tool_use", "id": call_id, "name": name, "input": dict(arguments)}
        case Opaque():
            return opaque(part)
    return None


def _redacted_data(part: Thinking) -> str | None:
    data = part.provider_data.get("data") if isinstance(part.provider_data, dict) else None
    return data if isinstance(data, str) else part.signature
