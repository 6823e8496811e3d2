"""What a stream accumulator yields as it goes: small increments for a UI to show."""

from __future__ import annotations

__all__ = ["ArgumentsDelta", "Delta", "TextDelta", "ThinkingDelta"]

import msgspec


class TextDelta(msgspec.Struct, frozen=True, tag="text_delta"):
    """More visible text for the content part at `index` of the response being built."""

    index: int
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, tag="thinking_delta"):
    index: int
    text: str


class ArgumentsDelta(msgspec.Struct, frozen=True, tag="arguments_delta"):
    """A fragment of a tool call's JSON arguments; `call_id` is the id results must reference."""

    index: int
    call_id: str
    name: str
    fragment: str


Delta = TextDelta | ThinkingDelta | ArgumentsDelta
