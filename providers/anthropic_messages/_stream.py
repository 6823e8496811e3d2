"""Messages API streams: the SSE events folded into the body `decode` reads."""

from __future__ import annotations

__all__ = ["StreamAccumulator"]

from typing import Any

from turnstile.core.messages import ModelResponse
from turnstile.providers._deltas import ArgumentsDelta, Delta, TextDelta, ThinkingDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._text import Pieces, heal
from turnstile.providers._wire import (
    expect,
    field,
    json_value,
    tool_call_id,
)

from ._blocks import (
    CLIENT_BLOCKS,
    unknown,
)
from ._decode import decode_body, failure


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
            self._error = failure(event.get("error"))
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
        return decode_body(body, calls)

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
