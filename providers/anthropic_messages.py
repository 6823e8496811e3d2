"""The Anthropic Messages API codec: neutral requests to JSON bodies, bodies and stream events back.

Pure: no I/O and no SDK objects, only the JSON that POST /v1/messages documents, so any transport
(the SDK, a replay, a test) can carry it. `StreamAccumulator.result()` folds a stream into the body
the non-streaming API would have sent and decodes that, so both paths give the same response.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

import json
from collections.abc import Iterable, Sequence
from typing import Any

from turnstile.core import ModelRequest, ToolSpec
from turnstile.core._decoding import decoded
from turnstile.core.messages import (
    AssistantMessage,
    Instructions,
    Message,
    ModelResponse,
    ModelStop,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
)
from turnstile.core.request import CachePolicy, ToolChoice, UseTool

from ._anthropic_blocks import (
    CLIENT_BLOCKS,
    FORMAT,
    citations_of,
    content_blocks,
    opaque,
    tool_result,
    unknown,
)
from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._deltas import ArgumentsDelta, Delta, TextDelta, ThinkingDelta
from ._errors import DecodeError, ProviderError, UnsupportedContent
from ._failures import error_failure
from ._text import Pieces, heal
from ._wire import (
    MAX_DEPTH,
    count,
    expect,
    field,
    json_value,
    kept,
    optional,
    reply,
    shallow,
    too_deep,
    tool_call,
    tool_call_id,
)

_STOPS = {
    "end_turn": ModelStop.end_turn,
    "tool_use": ModelStop.tool_use,
    "max_tokens": ModelStop.max_tokens,
    "stop_sequence": ModelStop.stop_sequence,
    "pause_turn": ModelStop.pause,
    "refusal": ModelStop.refusal,
    "model_context_window_exceeded": ModelStop.max_tokens,
}
_TRUNCATING = frozenset({"max_tokens", "model_context_window_exceeded"})
_ANY_OBJECT = {"type": "object"}


# -- encoding --------------------------------------------------------------------------------------


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
    tools = [_tool(spec) for spec in request.tools]
    tools += [t.definition for t in request.server_tools if t.format == FORMAT]
    if tools:
        body["tools"] = tools
    else:
        used = _tools_called(request.messages)
        if used:
            body["tools"] = [{"name": name, "input_schema": dict(_ANY_OBJECT)} for name in used]
            body["tool_choice"] = {"type": "none"}
    if mark is not None and "tools" in body:
        body["tools"][-1] = {**body["tools"][-1], "cache_control": mark}
    body.update(options)
    if "tools" in body and request.tool_choice != "auto":
        body["tool_choice"] = _tool_choice(request.tool_choice, options.get("tool_choice"))
    if request.output is not None:
        shape = {"type": "json_schema", "schema": request.output.schema}
        body["output_config"] = {**options.get("output_config", {}), "format": shape}
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["input_schema"] = spec.parameters
    if spec.strict is not None:
        tool["strict"] = spec.strict
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
            case AssistantMessage(content=parts):
                said = [b for b in map(_block, parts) if b is not None]
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


def _block(part: Part) -> dict[str, Any] | None:
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


# -- decoding --------------------------------------------------------------------------------------


def decode(body: dict[str, Any]) -> ModelResponse:
    """The neutral response for a Messages API response body.

    Text (its citations in `provider_data`), thinking (with its signature), redacted thinking
    (its `data` in `provider_data`, sent back verbatim) and tool calls are kept; every other
    block (server tools' calls and results, MCP, a type newer than the codec) is an `Opaque`
    holding it verbatim, so a new block type never breaks a run and goes back to the API as it
    came. A type that misspells a client block's (`tool_uze`, see `_unknown`) is a `DecodeError`,
    as is a kept block holding NaN or Infinity. A tool_use
    whose input is not an object becomes a call with empty `arguments` and the JSON text in
    `raw_arguments` (one nested deeper than `_wire.MAX_DEPTH`: the start of it), so it is not
    run; with `max_tokens` (or a full context window) a trailing tool_use was cut off
    and is marked `complete=False`. An unknown `stop_reason` maps to `ModelStop.other`; `raw_stop`
    keeps every value that differs from the neutral name.

    Raises `ProviderError` for an error body and `DecodeError` (naming the path) for a body
    without a documented field: `content`, a block's `type`, `text`, `id`, ..., `stop_reason`,
    `usage.input_tokens`, `usage.output_tokens`; or with a token count out of range.
    """
    return _decode(body, {})


def _decode(body: Any, streamed: dict[int, str]) -> ModelResponse:
    expect(body, dict, "")
    if body.get("type") == "error":
        raise _failure(body.get("error"))
    blocks = field(body, "content", list, "")
    raw_stop = field(body, "stop_reason", str, "")
    cut = raw_stop in _TRUNCATING
    last = len(blocks) - 1
    parts = [
        _part(block, f"content[{i}]", streamed.get(i), cut and i == last)
        for i, block in enumerate(blocks)
    ]
    stop = _STOPS.get(raw_stop, ModelStop.other)
    usage = _usage(field(body, "usage", dict, ""))
    return reply(parts, stop, usage, None if raw_stop == stop.value else raw_stop, body)


def _part(block: Any, path: str, streamed: str | None, cut: bool) -> Part:
    kind = field(expect(block, dict, path), "type", str, path)
    if kind == "text":
        text = field(block, "text", str, path)
        citations = optional(block, "citations", list, path, [])
        if not citations:
            return Text(text)
        return Text(text, provider_data={"citations": kept(citations, f"{path}.citations")})
    if kind == "thinking":
        signature = optional(block, "signature", str, path, "")
        return Thinking(field(block, "thinking", str, path), signature=signature or None)
    if kind == "redacted_thinking":
        data = heal(field(block, "data", str, path))
        return Thinking("", redacted=True, provider_data={"data": data})
    if kind == "tool_use":
        return _tool_call(block, path, streamed, cut)
    return Opaque(FORMAT, kept(unknown(block, kind, path), path))


def _tool_call(block: dict[str, Any], path: str, streamed: str | None, cut: bool) -> ToolCall:
    call_id = tool_call_id(block, "id", path)
    name = field(block, "name", str, path)
    if streamed is None:
        if "input" not in block:
            raise DecodeError(f"{path}.input", "missing")
        if not shallow(block["input"], MAX_DEPTH):
            return too_deep(call_id, name, block["input"], cut)
        value = kept(block["input"], f"{path}.input")
    else:
        try:  # as the body's `input` would have been read
            value = decoded(json.loads, streamed, ValueError, MAX_DEPTH)
        except ValueError:  # not JSON, or nested deeper than a reply keeps
            return tool_call(call_id, name, streamed, cut=cut)
        value = kept(value, f"{path}.input")
    if isinstance(value, dict):
        return ToolCall(call_id, name, value, complete=not cut)
    return tool_call(call_id, name, json.dumps(value, ensure_ascii=False), cut=cut)


def _usage(usage: dict[str, Any]) -> Usage:
    fresh = count(usage, "input_tokens", "usage")
    output = count(usage, "output_tokens", "usage")
    read = count(usage, "cache_read_input_tokens", "usage", 0)
    write = count(usage, "cache_creation_input_tokens", "usage", 0)
    details = optional(usage, "output_tokens_details", dict, "usage", {})
    reasoning = count(details, "thinking_tokens", "usage.output_tokens_details", 0)
    return Usage(fresh + read + write, output, read, write, reasoning)


def _failure(error: Any) -> ProviderError:
    """The error the API reported; retryable for the transient types the API docs list
    (429, 500, 504, 529), except a spend limit or billing, which no retry will lift."""
    if not isinstance(error, dict):
        raise DecodeError("error", "an error body without an error object")
    field(error, "type", str, "error")
    return error_failure(error, unexplained=False, keys=("type",))


# -- streaming -------------------------------------------------------------------------------------


class StreamAccumulator:
    """Folds the events of a streamed response (each SSE `data:` payload, parsed) into one.

    `feed` returns the deltas a UI may show as they come (their index is the block's); a tool call
    is announced by an `ArgumentsDelta` with an empty fragment when its block starts. Other
    blocks are assembled as the body would hold them: a server tool's `input` from its
    `input_json_delta`s, a text's citations from `citations_delta`s; a delta type the codec does
    not know leaves its block as it started; a call with no `input_json_delta`, or only blank
    ones, has no arguments (a server tool's keeps the `input: {}` it started with). `result()`
    equals what
    `decode` gives for the equivalent non-streaming body. A tool call cut off by max_tokens (its
    JSON incomplete, often without `content_block_stop`) comes back with `complete=False`, the
    members that were certainly complete as `arguments` and the text as `raw_arguments`.

    Usage in `message_delta` is cumulative: it replaces what `message_start` said. Pings and
    unknown event types (the API may add some) are ignored; an `error` event raises
    `ProviderError` now and from every later call.
    """

    __slots__ = (
        "_blocks",
        "_done",
        "_error",
        "_fragments",
        "_message",
        "_stop",
        "_texts",
        "_usage",
    )

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._stop: Any = None
        self._usage: dict[str, Any] = {}
        self._blocks: list[dict[str, Any]] = []
        self._fragments: dict[int, Pieces] = {}  # a block's input as JSON text, once a delta came
        self._texts: dict[int, Pieces] = {}  # the text or thinking of a block
        self._done = False
        self._error: ProviderError | None = None

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        """Take one event; return what it added. Raises `ProviderError` for an `error` event and
        `DecodeError` for an event that breaks the documented order or shape."""
        if self._error is not None:
            raise self._error
        kind = field(expect(event, dict, ""), "type", str, "")
        if kind == "error":
            self._error = _failure(event.get("error"))
            raise self._error
        if kind == "message_start":
            return self._start(field(event, "message", dict, kind))
        if kind not in ("content_block_start", "content_block_delta", "message_delta"):
            self._done = self._done or kind == "message_stop"
            return []
        if self._message is None:
            raise DecodeError(kind, "came before message_start")
        if kind == "content_block_start":
            return self._open(event)
        if kind == "content_block_delta":
            return self._delta(event)
        self._message_delta(event)
        return []

    def result(self) -> ModelResponse:
        """The whole response. Raises `ProviderError` (`incomplete_stream`, retryable) when the
        stream ended before `message_stop`, or the error an `error` event carried."""
        if self._error is not None:
            raise self._error
        if not self._done or self._message is None:
            raise ProviderError(
                "incomplete_stream", "the stream ended before message_stop", retryable=True
            )
        for index, pieces in self._texts.items():
            block = self._blocks[index]
            block[_BLOCK_TEXT[block["type"]]] = pieces.text()
        calls = {}
        for index, fragments in self._fragments.items():
            block, text = self._blocks[index], fragments.text()
            if block["type"] == "tool_use":
                calls[index] = text  # read as `decode` reads a call, cut or not
            elif text.strip():  # a server tool's call: its input as the body would have held it
                block["input"] = json_value(text, f"content[{index}].input")
        body = {
            **self._message,
            "content": self._blocks,
            "stop_reason": self._stop,
            "usage": self._usage,
        }
        return _decode(body, calls)

    def _start(self, message: dict[str, Any]) -> list[Delta]:
        if self._message is not None:
            raise DecodeError("message_start", "a second message_start")
        self._message = message
        self._stop = message.get("stop_reason")
        self._usage = dict(message["usage"]) if isinstance(message.get("usage"), dict) else {}
        deltas: list[Delta] = []
        for i, block in enumerate(field(message, "content", list, "message")):
            deltas += self._add(expect(block, dict, f"message.content[{i}]"))
        return deltas

    def _open(self, event: dict[str, Any]) -> list[Delta]:
        index = field(event, "index", int, "content_block_start")
        if index != len(self._blocks):
            raise DecodeError("content_block_start.index", f"expected {len(self._blocks)}")
        return self._add(field(event, "content_block", dict, "content_block_start"))

    def _add(self, block: dict[str, Any]) -> list[Delta]:
        index = len(self._blocks)
        path = f"content[{index}]"
        block = dict(block)
        kind = field(block, "type", str, path)
        self._blocks.append(block)
        if kind == "tool_use":  # the deltas quote them: healed, as the reply's are
            block["id"] = call_id = tool_call_id(block, "id", path)
            block["name"] = name = heal(field(block, "name", str, path))
            return [ArgumentsDelta(index, call_id, name, "")]
        if kind not in _BLOCK_TEXT:
            if kind not in CLIENT_BLOCKS:
                unknown(block, kind, path)
            return []
        if isinstance(block.get("citations"), list):
            block["citations"] = list(block["citations"])  # citations_delta adds to it
        shown = self._texts[index] = Pieces()
        text = shown.add(field(block, _BLOCK_TEXT[kind], str, path))
        if not text:
            return []
        return [TextDelta(index, text) if kind == "text" else ThinkingDelta(index, text)]

    def _delta(self, event: dict[str, Any]) -> list[Delta]:
        index = field(event, "index", int, "content_block_delta")
        if not 0 <= index < len(self._blocks):
            raise DecodeError("content_block_delta.index", f"no content block {index}")
        delta = field(event, "delta", dict, "content_block_delta")
        kind = field(delta, "type", str, "content_block_delta.delta")
        block = self._blocks[index]
        want = _DELTA_BLOCK.get(kind)
        if want is None:
            return []  # a delta this codec does not know: the block keeps what it started with
        if block["type"] != want and not (kind == "input_json_delta" and "input" in block):
            raise DecodeError(
                "content_block_delta.delta", f"{kind} for a block of type {block['type']}"
            )
        where = "content_block_delta.delta"
        if kind == "citations_delta":
            if not isinstance(block.get("citations"), list):
                block["citations"] = []
            block["citations"].append(field(delta, "citation", dict, where))  # see _add
            return []
        value = field(delta, _DELTA_FIELD[kind], str, where)
        if kind == "signature_delta":
            block["signature"] = value
            return []
        if kind == "input_json_delta":
            fragments = self._fragments.get(index)
            if fragments is None:
                fragments = self._fragments[index] = Pieces()
            shown = fragments.add(value)
            if not shown or block["type"] != "tool_use":
                return []
            return [ArgumentsDelta(index, block["id"], block["name"], shown)]
        shown = self._texts[index].add(value)  # pieces are joined once, in result()
        if not shown:
            return []
        return [TextDelta(index, shown) if kind == "text_delta" else ThinkingDelta(index, shown)]

    def _message_delta(self, event: dict[str, Any]) -> None:
        delta = field(event, "delta", dict, "message_delta")
        if "stop_reason" in delta:
            self._stop = delta["stop_reason"]
        usage = event.get("usage")
        if isinstance(usage, dict):
            self._usage.update((k, v) for k, v in usage.items() if v is not None)


_DELTA_BLOCK = {
    "text_delta": "text",
    "citations_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "thinking",
    "input_json_delta": "tool_use",
}
_BLOCK_TEXT = {"text": "text", "thinking": "thinking"}
_DELTA_FIELD = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "input_json_delta": "partial_json",
}


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `anthropic.Anthropic()` (`complete`) or `AsyncAnthropic()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, sdk_retries=False,
    **options)`; see `WireClient` (the SDK's own retries are off unless `sdk_retries=True`)."""

    wire = Wire("anthropic", "/v1/messages", "claude-sonnet-4-6", encode, decode, StreamAccumulator)
