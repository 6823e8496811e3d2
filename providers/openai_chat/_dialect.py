"""Dialects: how an OpenAI-compatible server departs from OpenAI's own Chat Completions.

A `Dialect` is data: which fields of a reply hold reasoning, where reasoning goes back (if at
all), whether a call without an id gets one made from the reply's id, and the token-limit field.
Under any dialect the reader also takes what such servers send in place of the documented shape:
arguments as a JSON object instead of a string, tool-call fragments without `index`, a body
without `finish_reason` (judged by its content, as a stream is).
"""

from __future__ import annotations

__all__ = [
    "DIALECTS",
    "FORMAT",
    "Dialect",
    "TokenLimitField",
    "arguments_text",
    "dialect_of",
    "made_id",
    "reasoning_parts",
    "sent_reasoning",
]

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import msgspec
from turnstile.core.messages import Part, Thinking, ToolCall

FORMAT = "openai_chat"
TokenLimitField = Literal["max_completion_tokens", "max_tokens"]
"""The body field that carries `ModelRequest.max_tokens`."""

_encoder = msgspec.json.Encoder()


class Dialect(NamedTuple):
    """The rules of one OpenAI-compatible server.

    `reads`: the message fields whose text is reasoning, read as `Thinking` (the first one
    present; another that only repeats it is dropped, one that differs is kept as an unknown
    field). `sends`: the assistant-message field that carries reasoning back, None for never.
    `tool_turns_only`: send it only in the assistant messages of a user turn that called tools
    (and there always, as "" when a message has none), as DeepSeek's thinking mode requires.
    `made_ids`: a call without an id gets `call_<n>_<reply id>`, never a random one, so replays
    and dumps stay equal. `token_limit_field`: the field of `max_tokens`.
    """

    name: str
    reads: tuple[str, ...] = ("reasoning_content", "reasoning")
    sends: str | None = None
    tool_turns_only: bool = False
    made_ids: bool = False
    token_limit_field: TokenLimitField = "max_tokens"


DIALECTS: Mapping[str, Dialect] = {
    d.name: d
    for d in (
        Dialect("vllm", sends="reasoning", made_ids=True),
        Dialect("ollama", sends="reasoning", made_ids=True),
        Dialect("lmstudio", made_ids=True),
        Dialect("openrouter"),  # its reasoning_details go back verbatim, as every unknown field
        Dialect("deepseek", sends="reasoning_content", tool_turns_only=True),
    )
}
"""The dialects known by name: `openai_chat.Client(sdk, dialect="deepseek")`."""


def dialect_of(dialect: str | Dialect) -> Dialect:
    if isinstance(dialect, Dialect):
        return dialect
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}: one of {', '.join(DIALECTS)}")
    return DIALECTS[dialect]


def reasoning_parts(reasoning: Mapping[str, str], unknown: dict[str, Any]) -> list[Part]:
    """The `Thinking` read from `reasoning` (field -> text, in the dialect's order); a later
    field that says something else goes into `unknown` as it came."""
    read = [(f, t) for f, t in reasoning.items() if t]
    if not read:
        return []
    field, text = read[0]
    for other, more in read[1:]:
        if more != text:
            unknown[other] = more
    return [Thinking(text, provider_data={FORMAT: {"field": field}})]


def made_id(dialect: Dialect | None, reply_id: Any, n: int) -> str | None:
    """The id of the `n`th call of a reply that sent none, if the dialect makes one and the
    reply has an id to make it from."""
    if dialect is None or not dialect.made_ids or type(reply_id) is not str or not reply_id:
        return None
    return f"call_{n}_{reply_id}"


def arguments_text(arguments: Any) -> Any:
    """Arguments sent as a JSON object, as the compact text OpenAI would have sent."""
    if type(arguments) is dict:
        return _encoder.encode(arguments).decode()
    return arguments


def sent_reasoning(
    dialect: Dialect | None, wire: Sequence[Mapping[str, Any]], content: Sequence[Part]
) -> dict[str, str]:
    """The reasoning field an assistant message sends back, after the messages in `wire`."""
    if dialect is None or dialect.sends is None:
        return {}
    text = "".join(
        p.text
        for p in content
        if type(p) is Thinking and type(p.provider_data) is dict and FORMAT in p.provider_data
    )
    if not dialect.tool_turns_only:
        return {dialect.sends: text} if text else {}
    calls = any(type(p) is ToolCall for p in content)
    return {dialect.sends: text} if calls or _after_tools(wire) else {}


def _after_tools(wire: Sequence[Mapping[str, Any]]) -> bool:
    """A tool result came since the last user message."""
    for message in reversed(wire):
        if message.get("role") == "tool":
            return True
        if message.get("role") == "user":
            return False
    return False
