"""The OpenAI Chat Completions wire format (`POST /v1/chat/completions`), pure and without I/O.

`encode` turns a neutral `ModelRequest` into the request body, `decode` reads a response body,
and `StreamAccumulator` folds streamed chunks into the very `ModelResponse` that `decode` gives
for the same reply. What Chat Completions cannot carry, and what we do about it:

- `Thinking` parts are dropped: the API has no way to send reasoning back.
- `ToolResult.is_error` has no field: the content goes as is, since the loop's and the tools'
  error contents already say what went wrong ("get_weather failed: ...", "not run: ...").
- Tool arguments are re-encoded from the dict as compact JSON, keys in the model's order and
  non-ASCII unescaped; so the string is byte-equal to the model's own only when the model wrote
  it that way (`{"city":"北京"}`, not `{"city": "北京"}`). `raw_arguments` (JSON that was invalid
  or cut off) go back verbatim.
- `max_tokens` becomes `max_completion_tokens`: `max_tokens` is deprecated and reasoning models
  reject it.

Reading replies: only the first choice counts. A `refusal` makes the stop `refusal` whatever the
finish_reason; "stop" with tool calls (a named `tool_choice`) is `tool_use`. Blank arguments
mean no arguments, unless `length` cut the last call, which then is `complete=False` with the
members salvaged that were provably whole. Ids are never invented: a call without one, or a
legacy `function_call` (which has none), is a `DecodeError`.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from turnstile.core import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ModelStop,
    Part,
    Text,
    ToolCall,
    Usage,
    UserMessage,
)

from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._deltas import ArgumentsDelta, Delta, TextDelta
from ._errors import DecodeError, ProviderError
from ._json import salvage

_encoder = msgspec.json.Encoder()

_STOPS = {
    "stop": ModelStop.end_turn,
    "tool_calls": ModelStop.tool_use,
    "function_call": ModelStop.tool_use,
    "length": ModelStop.max_tokens,
    "content_filter": ModelStop.content_filter,
}

# `type` of a 5xx (`server_error`, also for "the engine is currently overloaded") and `code` of a
# 429 for requests or tokens per minute; `insufficient_quota` (also a 429) will not pass by itself.
_RETRYABLE = frozenset({"server_error", "rate_limit_exceeded"})

_SURROGATE = re.compile("[\ud800-\udfff]")


# -- encoding --------------------------------------------------------------------------------------


def encode(
    request: ModelRequest, *, model: str, cache: WireCache | None = None, **options: Any
) -> dict[str, Any]:
    """The JSON body for `POST /v1/chat/completions`.

    `options` are merged over the body (`temperature=0`, `response_format=...`); `stream=True`
    also asks for the final usage chunk (`stream_options.include_usage`), which explicit
    `stream_options` may override.

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    entries of `messages` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.
    """
    head = [{"role": "system", "content": request.system}] if request.system is not None else None
    messages = folded(_fold, request.messages, cache, head)
    body: dict[str, Any] = {"model": model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    body["max_completion_tokens"] = request.max_tokens
    body.update(options)
    if options.get("stream") is True:
        body["stream_options"] = {"include_usage": True, **(options.get("stream_options") or {})}
    return body


def _fold(wire: list[dict[str, Any]], history: Iterable[Message]) -> None:
    for message in history:
        if type(message) is UserMessage:
            wire.append({"role": "user", "content": message.content})
        elif type(message) is AssistantMessage:
            wire.append(_assistant(message))
        else:
            wire.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                for r in message.results  # type: ignore[union-attr]
            )


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    texts = [p.text for p in message.content if type(p) is Text]
    calls = [
        {
            "id": p.id,
            "type": "function",
            "function": {
                "name": p.name,
                "arguments": p.raw_arguments
                if p.raw_arguments is not None
                else _encoder.encode(p.arguments).decode(),
            },
        }
        for p in message.content
        if type(p) is ToolCall
    ]
    out: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
    }
    if calls:
        out["tool_calls"] = calls
    return out


# -- decoding --------------------------------------------------------------------------------------


def decode(body: Mapping[str, Any]) -> ModelResponse:
    """The reply in a `chat.completion` body (its first choice).

    Raises `ProviderError` for an error body and `DecodeError` naming the path of anything the
    reply cannot be read without (`choices[0].message`, `...tool_calls[1].id`).
    """
    _raise_error(body)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise DecodeError("choices", "missing or empty")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise DecodeError("choices[0]", "not an object")
    where = "choices[0].message"
    message = choice.get("message")
    if not isinstance(message, dict):
        raise DecodeError(where, "missing")
    _no_function_call(message, where)
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise DecodeError(f"{where}.tool_calls", "not a list")
    calls = [_wire_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(tool_calls)]
    finish = choice.get("finish_reason")
    if not isinstance(finish, str):
        raise DecodeError("choices[0].finish_reason", "missing")
    return _response(
        _string(message, "content", where),
        _string(message, "refusal", where),
        calls,
        finish,
        _usage(body.get("usage")),
    )


def _raise_error(body: Mapping[str, Any]) -> None:
    error = body.get("error")
    if error is None:
        return
    if not isinstance(error, dict):
        raise ProviderError("error", str(error), retryable=False)
    names = [v for v in (error.get("code"), error.get("type")) if isinstance(v, str) and v]
    message = error.get("message")
    raise ProviderError(
        names[0] if names else "error",
        message if isinstance(message, str) else "the provider reported an error",
        retryable=not _RETRYABLE.isdisjoint(names),
    )


def _no_function_call(message: Mapping[str, Any], where: str) -> None:
    if message.get("function_call") is not None:
        raise DecodeError(f"{where}.function_call", "a legacy function_call carries no call id")


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"{where}.{key}", "not a string")
    return value


def _wire_call(call: Any, where: str) -> tuple[str, str, str]:
    """(id, name, arguments text) of one `tool_calls` entry."""
    if not isinstance(call, dict):
        raise DecodeError(where, "not an object")
    _function_type(call, where)
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise DecodeError(f"{where}.id", "missing: a tool result must quote the call's id")
    function = call.get("function")
    if not isinstance(function, dict):
        raise DecodeError(f"{where}.function", "missing")
    where = f"{where}.function"
    return call_id, _name(function, where), _string(function, "arguments", where)


def _function_type(call: Mapping[str, Any], where: str) -> None:
    kind = call.get("type") or "function"
    if kind != "function":
        raise DecodeError(f"{where}.type", f"unsupported tool call type {kind!r}")


def _name(function: Mapping[str, Any], where: str) -> str:
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise DecodeError(f"{where}.name", "missing")
    return name


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        raise DecodeError("usage", "not an object")
    prompt = _details(raw, "prompt_tokens_details")
    completion = _details(raw, "completion_tokens_details")
    return Usage(
        input_tokens=_count(raw, "prompt_tokens", "usage"),
        output_tokens=_count(raw, "completion_tokens", "usage"),
        cache_read_tokens=_count(prompt, "cached_tokens", "usage.prompt_tokens_details"),
        cache_write_tokens=_count(prompt, "cache_write_tokens", "usage.prompt_tokens_details"),
        reasoning_tokens=_count(completion, "reasoning_tokens", "usage.completion_tokens_details"),
    )


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = usage.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DecodeError(f"usage.{key}", "not an object")
    return value


def _count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise DecodeError(f"{where}.{key}", "not an integer")
    return value


def _response(
    text: str, refusal: str, calls: list[tuple[str, str, str]], finish: str, usage: Usage
) -> ModelResponse:
    """The neutral reply; shared by `decode` and `StreamAccumulator` so both agree exactly."""
    parts: list[Part] = [Text(t) for t in (text, refusal) if t]
    cut = len(calls) - 1 if finish == "length" else -1
    parts += [_tool_call(*call, cut=n == cut) for n, call in enumerate(calls)]
    raw_stop = None
    if refusal:
        stop = ModelStop.refusal
    elif finish == "stop" and calls:
        stop = ModelStop.tool_use  # a named `tool_choice` ends with "stop"
    elif finish in _STOPS:
        stop = _STOPS[finish]
    else:
        stop, raw_stop = ModelStop.other, finish
    return ModelResponse(parts, stop, usage, raw_stop)


def _tool_call(call_id: str, name: str, text: str, *, cut: bool) -> ToolCall:
    """A call from its arguments text. Blank text means no arguments, unless max tokens cut it."""
    if not text.strip():
        if cut:
            return ToolCall(call_id, name, {}, raw_arguments=text, complete=False)
        return ToolCall(call_id, name, {})
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        value = None
    if isinstance(value, dict):
        return ToolCall(call_id, name, value)
    if cut:
        return ToolCall(call_id, name, salvage(text), raw_arguments=text, complete=False)
    return ToolCall(call_id, name, {}, raw_arguments=text)


# -- streaming -------------------------------------------------------------------------------------


class _Buffer:
    """Text arriving in fragments. A high surrogate ending a fragment waits for its low half, so
    a character split between the UTF-16 code units of its escape (`\\ud83d` + `\\ude00`) is
    joined again instead of staying two lone code points."""

    __slots__ = ("_held", "_pieces")

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._held = ""

    def __bool__(self) -> bool:
        return bool(self._pieces or self._held)

    def add(self, fragment: str) -> str:
        """Take a fragment; return the part of it that can be shown now."""
        fragment, self._held = self._held + fragment, ""
        if fragment and "\ud800" <= fragment[-1] <= "\udbff":
            fragment, self._held = fragment[:-1], fragment[-1]
        if _SURROGATE.search(fragment):
            fragment = fragment.encode("utf-16-le", "surrogatepass").decode(
                "utf-16-le", "surrogatepass"
            )
        if fragment:
            self._pieces.append(fragment)
        return fragment

    def text(self) -> str:
        return "".join(self._pieces) + self._held


class _Call:
    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments = _Buffer()


class StreamAccumulator:
    """Folds the chunks of a streamed completion into one `ModelResponse`.

    `feed` takes each parsed `data:` chunk (not `[DONE]`) and returns the deltas it adds; tool
    call fragments are routed by their `index`, since only the first carries the id and name.
    `result()` equals what `decode` gives for the same reply sent whole. A chunk holding an
    `error` raises `ProviderError`; so does `result()` when no `finish_reason` ever arrived.
    """

    __slots__ = ("_calls", "_finish", "_refusal", "_text", "_usage")

    def __init__(self) -> None:
        self._text = _Buffer()
        self._refusal = _Buffer()
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None
        self._usage = Usage()

    def feed(self, chunk: Mapping[str, Any]) -> list[Delta]:
        """Take one chunk; returns the text and argument deltas it carried, in order."""
        _raise_error(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise DecodeError("choices", "missing")
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk["usage"])
        deltas: list[Delta] = []
        for n, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise DecodeError(f"choices[{n}]", "not an object")
            if choice.get("index", 0) == 0:
                deltas += self._choice(choice, f"choices[{n}]")
        return deltas

    def result(self) -> ModelResponse:
        """The whole reply; raises `ProviderError` (`incomplete_stream`) if it never finished."""
        if self._finish is None:
            raise ProviderError(
                "incomplete_stream", "the stream ended before a finish_reason", retryable=True
            )
        calls = [(c.id, c.name, c.arguments.text()) for _, c in sorted(self._calls.items())]
        return _response(self._text.text(), self._refusal.text(), calls, self._finish, self._usage)

    def _choice(self, choice: Mapping[str, Any], at: str) -> list[Delta]:
        deltas: list[Delta] = []
        delta = choice.get("delta") or {}  # Azure's content-filter chunks come without one
        where = f"{at}.delta"
        if not isinstance(delta, dict):
            raise DecodeError(where, "not an object")
        _no_function_call(delta, where)
        if text := self._text.add(_string(delta, "content", where)):
            deltas.append(TextDelta(0, text))
        if text := self._refusal.add(_string(delta, "refusal", where)):
            deltas.append(TextDelta(int(bool(self._text)), text))
        fragments = delta.get("tool_calls") or []
        if not isinstance(fragments, list):
            raise DecodeError(f"{where}.tool_calls", "not a list")
        for k, fragment in enumerate(fragments):
            deltas += self._fragment(fragment, f"{where}.tool_calls[{k}]")
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                raise DecodeError(f"{at}.finish_reason", "not a string")
            self._finish = finish
        return deltas

    def _fragment(self, fragment: Any, where: str) -> list[Delta]:
        if not isinstance(fragment, dict):
            raise DecodeError(where, "not an object")
        index = fragment.get("index")
        if type(index) is not int:
            raise DecodeError(f"{where}.index", "missing")
        _function_type(fragment, where)
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise DecodeError(f"{where}.function", "not an object")
        call_id = fragment.get("id")
        call = self._calls.get(index)
        if call is None:
            if not isinstance(call_id, str) or not call_id:
                raise DecodeError(f"{where}.id", "missing in the first fragment of a tool call")
            call = self._calls[index] = _Call(call_id, _name(function, f"{where}.function"))
        elif call_id and call_id != call.id:
            raise DecodeError(f"{where}.id", f"index {index} already holds call {call.id!r}")
        text = call.arguments.add(_string(function, "arguments", f"{where}.function"))
        if not text:
            return []
        part = int(bool(self._text)) + int(bool(self._refusal)) + sorted(self._calls).index(index)
        return [ArgumentsDelta(part, call.id, call.name, text)]


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, **options)`; see
    `WireClient`."""

    wire = Wire("openai", "/chat/completions", "gpt-5.1", encode, decode, StreamAccumulator)
