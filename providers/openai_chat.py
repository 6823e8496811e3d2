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
from ._failures import error_failure
from ._text import Pieces, heal
from ._wire import (
    count,
    expect,
    field,
    index,
    json_object,
    optional,
    reply,
    tool_call,
    tool_call_id,
)

_encoder = msgspec.json.Encoder()

_STOPS = {
    "stop": ModelStop.end_turn,
    "tool_calls": ModelStop.tool_use,
    "function_call": ModelStop.tool_use,
    "length": ModelStop.max_tokens,
    "content_filter": ModelStop.content_filter,
}


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
    _raise_error(expect(body, dict, ""))
    choices = field(body, "choices", list, "")
    if not choices:
        raise DecodeError("choices", "empty")
    choice = expect(choices[0], dict, "choices[0]")
    where = "choices[0].message"
    message = field(choice, "message", dict, "choices[0]")
    _no_function_call(message, where)
    tool_calls = optional(message, "tool_calls", list, where, [])
    calls = [_wire_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(tool_calls)]
    return _response(
        optional(message, "content", str, where, ""),
        optional(message, "refusal", str, where, ""),
        calls,
        field(choice, "finish_reason", str, "choices[0]"),
        _usage(body),
    )


def _raise_error(body: Mapping[str, Any]) -> None:
    error = body.get("error")
    if error is not None:
        raise error_failure(error, unexplained=False)


def _no_function_call(message: Mapping[str, Any], where: str) -> None:
    if message.get("function_call") is not None:
        raise DecodeError(f"{where}.function_call", "a legacy function_call carries no call id")


def _wire_call(call: Any, where: str) -> tuple[str, str, str]:
    """(id, name, arguments text) of one `tool_calls` entry."""
    _function_type(expect(call, dict, where), where)
    call_id = tool_call_id(call, "id", where)
    function = field(call, "function", dict, where)
    where = f"{where}.function"
    return call_id, _name(function, where), optional(function, "arguments", str, where, "")


def _function_type(call: Mapping[str, Any], where: str) -> None:
    kind = optional(call, "type", str, where, "") or "function"
    if kind != "function":
        raise DecodeError(f"{where}.type", f"unsupported tool call type {kind!r}")


def _name(function: Mapping[str, Any], where: str) -> str:
    name = field(function, "name", str, where)
    if not name:
        raise DecodeError(f"{where}.name", "empty")
    return heal(name)


def _usage(body: Mapping[str, Any]) -> Usage:
    """The usage in `body`, none when it has none (a stream's chunks but the last)."""
    usage = optional(body, "usage", dict, "", {})
    prompt = optional(usage, "prompt_tokens_details", dict, "usage", {})
    completion = optional(usage, "completion_tokens_details", dict, "usage", {})
    at_prompt, at_completion = "usage.prompt_tokens_details", "usage.completion_tokens_details"
    return Usage(
        input_tokens=count(usage, "prompt_tokens", "usage", 0),
        output_tokens=count(usage, "completion_tokens", "usage", 0),
        cache_read_tokens=count(prompt, "cached_tokens", at_prompt, 0),
        cache_write_tokens=count(prompt, "cache_write_tokens", at_prompt, 0),
        reasoning_tokens=count(completion, "reasoning_tokens", at_completion, 0),
    )


def _response(
    text: str, refusal: str, calls: list[tuple[str, str, str]], finish: str, usage: Usage
) -> ModelResponse:
    """The neutral reply; shared by `decode` and `StreamAccumulator` so both agree exactly."""
    parts: list[Part] = [Text(t) for t in (text, refusal) if t]
    last = len(calls) - 1 if finish == "length" else -1  # a closed object was not cut, though
    parts += [
        tool_call(call_id, name, text, cut=n == last and json_object(text) is None)
        for n, (call_id, name, text) in enumerate(calls)
    ]
    raw_stop = None
    if refusal:
        stop = ModelStop.refusal
    elif finish == "stop" and calls:
        stop = ModelStop.tool_use  # a named `tool_choice` ends with "stop"
    elif finish in _STOPS:
        stop = _STOPS[finish]
    else:
        stop, raw_stop = ModelStop.other, finish
    return reply(parts, stop, usage, raw_stop)


# -- streaming -------------------------------------------------------------------------------------


class _Call:
    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments = Pieces()


class StreamAccumulator:
    """Folds the chunks of a streamed completion into one `ModelResponse`.

    `feed` takes each parsed `data:` chunk (not `[DONE]`) and returns the deltas it adds; tool
    call fragments are routed by their `index`, since only the first carries the id and name
    (calls count from 0 in order: an index past the next call is a `DecodeError`).
    `result()` equals what `decode` gives for the same reply sent whole. A chunk holding an
    `error` raises `ProviderError`; so does `result()` when no `finish_reason` ever arrived,
    unless `done()` said the stream ended with `data: [DONE]`: then the reply is over and its
    content says why, `tool_calls` when it holds calls, each whole JSON (or blank), `stop` when
    it holds none (some routers, OpenRouter among them, send no finish_reason for some models).
    """

    __slots__ = ("_calls", "_done", "_finish", "_refusal", "_text", "_usage")

    def __init__(self) -> None:
        self._text = Pieces()
        self._refusal = Pieces()
        self._calls: list[_Call] = []
        self._finish: str | None = None
        self._done = False
        self._usage = Usage()

    def feed(self, chunk: Mapping[str, Any]) -> list[Delta]:
        """Take one chunk; returns the text and argument deltas it carried, in order."""
        _raise_error(expect(chunk, dict, ""))
        choices = field(chunk, "choices", list, "")
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk)
        deltas: list[Delta] = []
        for n, choice in enumerate(choices):
            if expect(choice, dict, f"choices[{n}]").get("index", 0) == 0:
                deltas += self._choice(choice, f"choices[{n}]")
        return deltas

    def done(self) -> None:
        """The stream ended with `data: [DONE]`: the server says nothing more will come."""
        self._done = True

    def result(self) -> ModelResponse:
        """The whole reply; raises `ProviderError` (`incomplete_stream`) if it never finished."""
        calls = [(c.id, c.name, c.arguments.text()) for c in self._calls]
        finish = self._finish
        if finish is None and self._done:
            whole = all(json_object(text) is not None or not text.strip() for *_, text in calls)
            finish = ("tool_calls" if calls else "stop") if whole else None
        if finish is None:
            raise ProviderError(
                "incomplete_stream", "the stream ended before a finish_reason", retryable=True
            )
        return _response(self._text.text(), self._refusal.text(), calls, finish, self._usage)

    def _choice(self, choice: Mapping[str, Any], at: str) -> list[Delta]:
        deltas: list[Delta] = []
        delta = optional(choice, "delta", dict, at, {})  # Azure's content-filter chunks have none
        where = f"{at}.delta"
        _no_function_call(delta, where)
        if text := self._text.add(optional(delta, "content", str, where, "")):
            deltas.append(TextDelta(0, text))
        if text := self._refusal.add(optional(delta, "refusal", str, where, "")):
            deltas.append(TextDelta(int(bool(self._text)), text))
        fragments = optional(delta, "tool_calls", list, where, [])
        for k, fragment in enumerate(fragments):
            deltas += self._fragment(fragment, f"{where}.tool_calls[{k}]")
        self._finish = optional(choice, "finish_reason", str, at, self._finish)
        return deltas

    def _fragment(self, fragment: Any, where: str) -> list[Delta]:
        """A piece of the call at `index`: calls are numbered from 0 in order, so a fragment
        names one already begun or the next."""
        at = index(expect(fragment, dict, where), "index", where, len(self._calls))
        _function_type(fragment, where)
        function = optional(fragment, "function", dict, where, {})
        if at == len(self._calls):
            call_id = tool_call_id(fragment, "id", where)
            call = _Call(call_id, _name(function, f"{where}.function"))
            self._calls.append(call)
        else:
            call = self._calls[at]
            call_id = optional(fragment, "id", str, where, "")
            if call_id and call_id != call.id:
                raise DecodeError(f"{where}.id", f"index {at} already holds call {call.id!r}")
        text = call.arguments.add(optional(function, "arguments", str, f"{where}.function", ""))
        if not text:
            return []
        part = int(bool(self._text)) + int(bool(self._refusal)) + at
        return [ArgumentsDelta(part, call.id, call.name, text)]


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, **options)`; see
    `WireClient`."""

    wire = Wire("openai", "/chat/completions", "gpt-5.1", encode, decode, StreamAccumulator)
