"""Chat Completions streams: `data:` chunks folded into the reply `decode` reads whole."""

from __future__ import annotations

__all__ = ["StreamAccumulator"]

from collections.abc import Mapping
from typing import Any

from turnstile.core.messages import ModelResponse, Usage
from turnstile.providers._deltas import ArgumentsDelta, Delta, TextDelta, ThinkingDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._text import Pieces, heal
from turnstile.providers._wire import (
    expect,
    field,
    index,
    kept,
    optional,
    tool_call_id,
)

from ._decode import (
    CALL_FIELDS,
    EMPTY,
    MESSAGE_FIELDS,
    call_name,
    function_type,
    judged,
    no_function_call,
    raise_error,
    response_of,
    usage_of,
)
from ._dialect import Dialect, arguments_text, made_id


class _Unknown:
    """The unknown fields of a message or call, gathered over a stream's chunks into what
    `decode` reads from the whole: strings join, arrays extend, other values are the last one."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def add(self, obj: Mapping[str, Any], known: frozenset[str], where: str) -> None:
        for key, value in obj.items():
            if key in known or value in EMPTY:
                continue
            name, old = heal(key), self._values.get(heal(key))
            if type(value) is str:
                pieces = old if type(old) is Pieces else Pieces()
                pieces.add(value)
                self._values[name] = pieces
            elif type(value) is list and type(old) is list:
                old += kept(value, f"{where}.{key}")
            else:
                self._values[name] = kept(value, f"{where}.{key}")

    def result(self) -> dict[str, Any]:
        return {k: v.text() if type(v) is Pieces else v for k, v in self._values.items()}


class _Call:
    __slots__ = ("arguments", "id", "name", "unknown")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments = Pieces()
        self.unknown = _Unknown()


class StreamAccumulator:
    """Folds the chunks of a streamed completion into one `ModelResponse`.

    `feed` takes each parsed `data:` chunk (not `[DONE]`) and returns the deltas it adds; tool
    call fragments are routed by their `index`, since only the first carries the id and name
    (calls count from 0 in order: an index past the next call is a `DecodeError`).
    `result()` equals what `decode` gives for the same reply sent whole. A chunk holding an
    `error` raises `ProviderError`. `result()` is the end of the stream: one that ended without
    a `finish_reason` (some gateways, OpenRouter among them, send none for some models) is
    judged by its content, with or without `data: [DONE]`: `tool_calls` when it holds calls,
    each whole JSON (or blank), `stop` when it holds text alone; with a call cut short, or
    nothing said at all, it is `ProviderError("incomplete_stream")`, retryable.

    With a `dialect` (an OpenAI-compatible server's), its reasoning fields are `Thinking`, the
    first part (`ThinkingDelta`s as they come), and a fragment without `index` belongs to the
    last call unless it names a function or another id, which begins the next one.
    """

    __slots__ = (
        "_annotations",
        "_calls",
        "_dialect",
        "_finish",
        "_known",
        "_named",
        "_reasoning",
        "_refusal",
        "_text",
        "_unknown",
        "_usage",
    )

    def __init__(self, dialect: Dialect | None = None) -> None:
        self._dialect = dialect
        self._reasoning = {f: Pieces() for f in (dialect.reads if dialect else ())}
        self._known = MESSAGE_FIELDS.union(self._reasoning)  # the rest of a delta is kept
        self._text = Pieces()
        self._refusal = Pieces()
        self._annotations: list[Any] = []
        self._unknown = _Unknown()
        self._calls: list[_Call] = []
        self._finish: str | None = None
        self._usage = Usage()
        self._named: dict[str, Any] = {}  # the completion's id and model, as a chunk says

    def feed(self, chunk: Mapping[str, Any]) -> list[Delta]:
        """Take one chunk; returns the text and argument deltas it carried, in order."""
        raise_error(expect(chunk, dict, ""))
        choices = field(chunk, "choices", list, "")
        for key in ("id", "model"):
            if chunk.get(key):
                self._named.setdefault(key, chunk[key])
        if chunk.get("usage") is not None:
            self._usage = usage_of(chunk)
        deltas: list[Delta] = []
        for n, choice in enumerate(choices):
            if expect(choice, dict, f"choices[{n}]").get("index", 0) == 0:
                deltas += self._choice(choice, f"choices[{n}]")
        return deltas

    def result(self) -> ModelResponse:
        """The whole reply; raises `ProviderError` (`incomplete_stream`) if it never finished."""
        calls = [(c.id, c.name, c.arguments.text(), c.unknown.result()) for c in self._calls]
        reasoning = {f: p.text() for f, p in self._reasoning.items()}
        finish = self._finish
        if finish is None:
            finish = judged(calls, self._text or self._refusal or any(reasoning.values()))
        if finish is None:
            raise ProviderError(
                "incomplete_stream", "the stream ended before a finish_reason", retryable=True
            )
        return response_of(
            self._text.text(),
            self._refusal.text(),
            calls,
            finish,
            self._usage,
            self._annotations,
            self._unknown.result(),
            self._named,
            reasoning,
        )

    def _choice(self, choice: Mapping[str, Any], at: str) -> list[Delta]:
        deltas: list[Delta] = []
        delta = optional(choice, "delta", dict, at, {})  # Azure's content-filter chunks have none
        where = f"{at}.delta"
        no_function_call(delta, where)
        for name, pieces in self._reasoning.items():
            if text := pieces.add(optional(delta, name, str, where, "")):
                deltas.append(ThinkingDelta(0, text))
        lead = self._lead()
        if text := self._text.add(optional(delta, "content", str, where, "")):
            deltas.append(TextDelta(lead, text))
        if text := self._refusal.add(optional(delta, "refusal", str, where, "")):
            deltas.append(TextDelta(lead + int(bool(self._text)), text))
        self._annotations += kept(
            optional(delta, "annotations", list, where, []), f"{where}.annotations"
        )
        self._unknown.add(delta, self._known, where)
        fragments = optional(delta, "tool_calls", list, where, [])
        for k, fragment in enumerate(fragments):
            deltas += self._fragment(fragment, f"{where}.tool_calls[{k}]")
        self._finish = optional(choice, "finish_reason", str, at, self._finish)
        return deltas

    def _lead(self) -> int:
        """How many parts come before the text: the reasoning's `Thinking`, once it began."""
        return int(any(self._reasoning.values()))

    def _fragment(self, fragment: Any, where: str) -> list[Delta]:
        """A piece of the call at `index`: calls are numbered from 0 in order, so a fragment
        names one already begun or the next."""
        at = self._index(expect(fragment, dict, where), where)
        function_type(fragment, where)
        function = optional(fragment, "function", dict, where, {})
        if self._dialect is not None:
            function = {**function, "arguments": arguments_text(function.get("arguments"))}
        if at == len(self._calls):
            made = None if fragment.get("id") else made_id(self._dialect, self._named.get("id"), at)
            call_id = made or tool_call_id(fragment, "id", where)
            call = _Call(call_id, call_name(function, f"{where}.function"))
            self._calls.append(call)
        else:
            call = self._calls[at]
            call_id = optional(fragment, "id", str, where, "")
            if call_id and call_id != call.id:
                raise DecodeError(f"{where}.id", f"index {at} already holds call {call.id!r}")
        call.unknown.add(fragment, CALL_FIELDS, where)
        text = call.arguments.add(optional(function, "arguments", str, f"{where}.function", ""))
        if not text:
            return []
        part = self._lead() + int(bool(self._text)) + int(bool(self._refusal)) + at
        return [ArgumentsDelta(part, call.id, call.name, text)]

    def _index(self, fragment: Mapping[str, Any], where: str) -> int:
        """The fragment's `index`; a dialect's fragment without one continues the last call,
        unless it names a function or an id of its own (then it begins the next)."""
        if self._dialect is None or fragment.get("index") is not None:
            return index(fragment, "index", where, len(self._calls))
        function = fragment.get("function")
        named = type(function) is dict and bool(function.get("name"))
        call_id = fragment.get("id")
        last = self._calls[-1] if self._calls else None
        begins = last is None or named or bool(call_id and call_id != last.id)
        return len(self._calls) - (not begins)
