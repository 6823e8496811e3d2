"""`portable`: a history recorded on one wire format, made fit to send on another.

A codec refuses a part it cannot carry (an `Opaque` of another format) rather than drop it
unseen. Re-running a recorded run against another provider (`fork(..., model=...)`), a run
that falls back to another provider's model, need the history carried over by rules instead,
the same every time and written down here:

- An `Opaque` of another format (a server tool's call or result, a block newer than its codec)
  is left out. What the model said of it in text stays. A message left with nothing holds one
  text part saying what was left out, so the conversation keeps its turns.
- `Thinking` stays as it is: each codec sends back only the reasoning its API accepts
  (Anthropic Messages: signed or redacted thinking; OpenAI Responses: its reasoning items;
  Chat Completions: none, but under a server's dialect the reasoning that server wrote) and
  leaves the rest out.
- Text, tool calls and their results, images, documents and audio are neutral, and stay.
  Provider data on a part (citations, item ids) goes back only to its own format.
"""

from __future__ import annotations

__all__ = ["FORMATS", "portable"]

from collections.abc import Sequence
from typing import Any

import msgspec
from turnstile.core.messages import (
    AssistantMessage,
    Message,
    Opaque,
    Text,
    ToolResult,
    ToolResults,
    UserMessage,
)

FORMATS = ("anthropic_messages", "openai_chat", "openai_responses")
"""The wire formats a history may be recorded on and sent to."""


def portable(messages: Sequence[Message], format: str) -> list[Message]:
    """`messages` as a request in `format` can carry them, by the rules above; the messages
    that need no change are the same objects. Raises `ValueError` for an unknown format."""
    if format not in FORMATS:
        raise ValueError(f"unknown wire format {format!r}: one of {', '.join(FORMATS)}")
    return [_carried(m, format) for m in messages]


def _foreign(part: object, format: str) -> bool:
    return type(part) is Opaque and part.format != format


def _kept(content: Any, format: str) -> Any:
    """`content` (text, or parts) without another format's blocks, one text part saying what
    was left out if nothing else is left; `content` itself when it holds none."""
    if isinstance(content, str) or not any(_foreign(p, format) for p in content):
        return content
    kept = [p for p in content if not _foreign(p, format)]
    if kept:
        return kept
    formats = sorted({p.format for p in content if _foreign(p, format)})
    return [Text(f"(left out here: content only {' and '.join(formats)} can carry)")]


def _carried(message: Message, format: str) -> Message:
    if type(message) is AssistantMessage or type(message) is UserMessage:
        content = _kept(message.content, format)
        if content is message.content:
            return message
        return msgspec.structs.replace(message, content=content)
    if type(message) is ToolResults:
        results = [_result(r, format) for r in message.results]
        if all(new is old for new, old in zip(results, message.results, strict=True)):
            return message
        return msgspec.structs.replace(message, results=results)
    return message


def _result(result: ToolResult, format: str) -> ToolResult:
    content = _kept(result.content, format)
    return result if content is result.content else msgspec.structs.replace(result, content=content)
