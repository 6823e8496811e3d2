"""Messages API replies: a response body as the neutral `ModelResponse`; the stream's
accumulator rebuilds that body and reads it here too, so both paths agree."""

from __future__ import annotations

__all__ = ["decode", "decode_body", "failure"]

import json
from typing import Any

from turnstile.core.decoding import decoded
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    Usage,
)
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._failures import error_failure
from turnstile.providers._text import heal
from turnstile.providers._wire import (
    MAX_DEPTH,
    count,
    expect,
    field,
    kept,
    optional,
    reply,
    shallow,
    too_deep,
    tool_call,
    tool_call_id,
)

from ._blocks import (
    FORMAT,
    unknown,
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
    return decode_body(body, {})


def decode_body(body: Any, streamed: dict[int, str]) -> ModelResponse:
    """`decode`, with the JSON text of each streamed tool call by its block's index."""
    expect(body, dict, "")
    if body.get("type") == "error":
        raise failure(body.get("error"))
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


def failure(error: Any) -> ProviderError:
    """The error the API reported; retryable for the transient types the API docs list
    (429, 500, 504, 529), except a spend limit or billing, which no retry will lift."""
    if not isinstance(error, dict):
        raise DecodeError("error", "an error body without an error object")
    field(error, "type", str, "error")
    return error_failure(error, unexplained=False, keys=("type",))
