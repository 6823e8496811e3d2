"""Server-Sent Events: an incremental parser for event streams that arrive in arbitrary chunks.

It follows the WHATWG event-stream rules the SDKs follow: lines end in CRLF, LF or CR; `:` starts
a comment; `data:` lines join with LF; an event is dispatched at a blank line if it has data, so
an event the stream does not finish with a blank line is dropped, as the SDKs drop it.
"""

from __future__ import annotations

__all__ = ["SSEDecoder", "SSEEvent", "events_json", "parse_sse"]

import codecs
import re
from typing import Any

import msgspec

from ._errors import DecodeError
from ._wire import json_value

_EOL = re.compile(r"\r\n|\r|\n")


class SSEEvent(msgspec.Struct, frozen=True):
    """One dispatched event: its `event:` name (None when the stream gave none) and its data."""

    event: str | None
    data: str


class SSEDecoder:
    """Turns the bytes of an event stream, fed in chunks of any size, into events.

    A chunk may end inside a UTF-8 character or between the CR and LF of a line break; the
    decoder holds such tails until the next chunk (or `close`) says how they end. Each chunk is
    scanned once: a line that spans many chunks is kept as its pieces and joined once it ends, so
    the cost of a stream grows with its size, whatever the size of its chunks or events.
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pieces: list[str] = []  # the line under way, as it arrived
        self._cr = False  # the last chunk ended in CR: a LF opening the next one is its pair
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add the next bytes of the stream; return the events they complete, in order."""
        return self._push(self._utf8.decode(chunk), final=False)

    def close(self) -> list[SSEEvent]:
        """End the stream: settle a held CR or partial character; an unfinished event is dropped."""
        events = self._push(self._utf8.decode(b"", final=True), final=True)
        self._pieces, self._cr, self._started = [], False, False
        self._event, self._data = None, []
        return events

    def _push(self, text: str, *, final: bool) -> list[SSEEvent]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._cr:
            text = "\r" + text  # one character more: the CR waits for its chunk to say its end
            self._cr = False
        if text.endswith("\r") and not final:
            text, self._cr = text[:-1], True
        events: list[SSEEvent] = []
        start = 0
        for end in _EOL.finditer(text):
            line = text[start : end.start()]
            if self._pieces:
                self._pieces.append(line)
                line = "".join(self._pieces)
                self._pieces = []
            event = self._line(line)
            if event is not None:
                events.append(event)
            start = end.end()
        if start < len(text):
            self._pieces.append(text[start:])
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        event, data = self._event, self._data
        self._event, self._data = None, []
        if not data:
            return None
        return SSEEvent(event=event or None, data="\n".join(data))


def parse_sse(text: str) -> list[SSEEvent]:
    """All events of a complete event stream given as text (e.g. a trace's `sse` field)."""
    decoder = SSEDecoder()
    return decoder.feed(text.encode("utf-8")) + decoder.close()


def events_json(text: str) -> list[dict[str, Any]]:
    """The JSON objects carried by the `data:` of each event, skipping `[DONE]` and empty data.

    Raises:
        DecodeError: an event's data is not a JSON object, or nests deeper than Python can
            follow (path `events[i].data`).
    """
    payloads: list[dict[str, Any]] = []
    for index, event in enumerate(parse_sse(text)):
        if event.data in ("", "[DONE]"):
            continue
        path = f"events[{index}].data"
        payload = json_value(event.data, path)
        if not isinstance(payload, dict):
            raise DecodeError(path, f"expected a JSON object, got {type(payload).__name__}")
        payloads.append(payload)
    return payloads
