"""Chat Completions replies: a `chat.completion` body as the neutral `ModelResponse`; the
helpers here are shared with the stream's accumulator so both read a reply alike."""

from __future__ import annotations

__all__ = [
    "CALL_FIELDS",
    "EMPTY",
    "MESSAGE_FIELDS",
    "WireCall",
    "call_name",
    "decode",
    "function_type",
    "judged",
    "no_function_call",
    "raise_error",
    "response_of",
    "usage_of",
]

from collections.abc import Mapping
from typing import Any

import msgspec
from turnstile.core.messages import ModelResponse, ModelStop, Opaque, Text, Usage
from turnstile.providers._errors import DecodeError
from turnstile.providers._failures import error_failure
from turnstile.providers._text import heal
from turnstile.providers._wire import (
    count,
    expect,
    field,
    json_object,
    kept,
    optional,
    reply,
    tool_call,
    tool_call_id,
)

from ._dialect import FORMAT, Dialect, arguments_text, made_id, reasoning_parts

_STOPS = {
    "stop": ModelStop.end_turn,
    "tool_calls": ModelStop.tool_use,
    "function_call": ModelStop.tool_use,
    "length": ModelStop.max_tokens,
    "content_filter": ModelStop.content_filter,
}
# What the codec reads of a message (or a stream's delta) and of a tool call; the rest is kept.
MESSAGE_FIELDS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "annotations"}
)
CALL_FIELDS = frozenset({"index", "id", "type", "function"})
WireCall = tuple[str, str, str, dict[str, Any]]  # id, name, arguments text, unknown fields
EMPTY: tuple[Any, ...] = (None, "", [], {})


def decode(body: Mapping[str, Any], dialect: Dialect | None = None) -> ModelResponse:
    """The reply in a `chat.completion` body (its first choice), as `dialect` (an
    OpenAI-compatible server's) reads it, if given.

    Raises `ProviderError` for an error body and `DecodeError` naming the path of anything the
    reply cannot be read without (`choices[0].message`, `...tool_calls[1].id`).
    """
    raise_error(expect(body, dict, ""))
    choices = field(body, "choices", list, "")
    if not choices:
        raise DecodeError("choices", "empty")
    choice = expect(choices[0], dict, "choices[0]")
    where = "choices[0].message"
    message = field(choice, "message", dict, "choices[0]")
    no_function_call(message, where)
    tool_calls = optional(message, "tool_calls", list, where, [])
    calls = [
        _wire_call(c, f"{where}.tool_calls[{i}]", dialect, body.get("id"), i)
        for i, c in enumerate(tool_calls)
    ]
    reads = () if dialect is None else dialect.reads
    reasoning = {f: optional(message, f, str, where, "") for f in reads}
    text = optional(message, "content", str, where, "")
    refusal = optional(message, "refusal", str, where, "")
    finish = optional(choice, "finish_reason", str, "choices[0]", "") if dialect else None
    if not finish:  # a dialect's reply without one is judged by its content
        finish = judged(calls, text or refusal or any(reasoning.values())) if dialect else None
        finish = finish or field(choice, "finish_reason", str, "choices[0]")
    return response_of(
        text,
        refusal,
        calls,
        finish,
        usage_of(body),
        kept(optional(message, "annotations", list, where, []), f"{where}.annotations"),
        _unknown(message, MESSAGE_FIELDS.union(reads), where),
        body,
        reasoning,
    )


def judged(calls: list[WireCall], said: object) -> str | None:
    """The finish_reason of a reply that sent none, from its content: whole calls (or blank)
    are `tool_calls`, something said without calls `stop`; None for a call cut short or
    nothing said at all."""
    if not calls:
        return "stop" if said else None
    whole = all(json_object(text) is not None or not text.strip() for _, _, text, _ in calls)
    return "tool_calls" if whole else None


def raise_error(body: Mapping[str, Any]) -> None:
    error = body.get("error")
    if error is not None:
        raise error_failure(error, unexplained=False)


def no_function_call(message: Mapping[str, Any], where: str) -> None:
    if message.get("function_call") is not None:
        raise DecodeError(f"{where}.function_call", "a legacy function_call carries no call id")


def _wire_call(call: Any, where: str, dialect: Dialect | None, reply_id: Any, n: int) -> WireCall:
    """(id, name, arguments text, unknown fields) of the `n`th `tool_calls` entry; a dialect
    may make its missing id from the reply's, and reads arguments sent as a JSON object."""
    function_type(expect(call, dict, where), where)
    made = None if call.get("id") else made_id(dialect, reply_id, n)
    call_id = made or tool_call_id(call, "id", where)
    function = field(call, "function", dict, where)
    at = f"{where}.function"
    if dialect is not None:
        function = {**function, "arguments": arguments_text(function.get("arguments"))}
    arguments = optional(function, "arguments", str, at, "")
    return call_id, call_name(function, at), arguments, _unknown(call, CALL_FIELDS, where)


def _unknown(obj: Mapping[str, Any], known: frozenset[str], where: str) -> dict[str, Any]:
    """The fields of `obj` the codec does not read, kept (`kept`); empty values (null, "", [],
    {}: OpenRouter's `"reasoning_details": []`) say nothing."""
    return {
        heal(key): kept(value, f"{where}.{key}")
        for key, value in obj.items()
        if key not in known and value not in EMPTY
    }


def function_type(call: Mapping[str, Any], where: str) -> None:
    kind = optional(call, "type", str, where, "") or "function"
    if kind != "function":
        raise DecodeError(f"{where}.type", f"unsupported tool call type {kind!r}")


def call_name(function: Mapping[str, Any], where: str) -> str:
    name = field(function, "name", str, where)
    if not name:
        raise DecodeError(f"{where}.name", "empty")
    return heal(name)


def usage_of(body: Mapping[str, Any]) -> Usage:
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


def response_of(
    text: str,
    refusal: str,
    calls: list[WireCall],
    finish: str,
    usage: Usage,
    annotations: list[Any],
    unknown: dict[str, Any],
    named: Mapping[str, Any],
    reasoning: Mapping[str, str],
) -> ModelResponse:
    """The neutral reply; shared by `decode` and `StreamAccumulator` so both agree exactly.
    `annotations` go with the text (without text, with the unknown fields); `reasoning` (a
    dialect's fields) comes first, as `Thinking`."""
    parts = reasoning_parts(reasoning, unknown)
    if text:
        parts.append(Text(text, {"annotations": annotations} if annotations else None))
    elif annotations:
        unknown = {"annotations": annotations, **unknown}
    if refusal:
        parts.append(Text(refusal))
    last = len(calls) - 1 if finish == "length" else -1  # a closed object was not cut, though
    parts += [
        tool_call(
            call_id,
            name,
            arguments,
            cut=n == last and json_object(arguments) is None,
            provider_data={FORMAT: own} if own else None,
        )
        for n, (call_id, name, arguments, own) in enumerate(calls)
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
    response = reply(parts, stop, usage, raw_stop, named)
    if not unknown:
        return response
    return msgspec.structs.replace(response, content=[*response.content, Opaque(FORMAT, unknown)])
