"""The neutral message ledger: what the user, the model and the tools said.

Every provider's wire format maps onto these frozen structs and back. Opaque data a provider needs
to see again (thinking signatures, reasoning items, item ids) rides along in `provider_data`
untouched, so nothing the model said is lost between turns.

Messages are immutable trees without reference cycles, so their structs opt out of the cyclic
garbage collector (`gc=False`): a long history then adds nothing to every collection's work.
"""

from __future__ import annotations

__all__ = [
    "AssistantMessage",
    "Message",
    "ModelResponse",
    "ModelStop",
    "Part",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "Usage",
    "UserMessage",
    "text_of",
]

import enum
from typing import Any

import msgspec


class Text(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="text"):
    """Visible text; `provider_data` keeps what the provider needs back (e.g. an item id)."""

    text: str
    provider_data: Any = None


class Thinking(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="thinking"):
    """Reasoning the model showed (or hid: `redacted`); signature and provider data go back."""

    text: str
    signature: str | None = None
    redacted: bool = False
    provider_data: Any = None


class ToolCall(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="tool_call"):
    """A call the model asked for.

    `raw_arguments` holds the exact text when the arguments were not valid JSON (then `arguments`
    is empty, or for a cut-off call the members known to be complete); `complete=False` means max
    tokens cut the call off. Neither kind is ever run.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None
    complete: bool = True
    provider_data: Any = None


class ToolResult(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="tool_result"):
    call_id: str
    content: str
    is_error: bool = False


Part = Text | Thinking | ToolCall


class UserMessage(msgspec.Struct, frozen=True, gc=False, tag="user"):
    content: str


class AssistantMessage(msgspec.Struct, frozen=True, gc=False, tag="assistant"):
    content: list[Part]


class ToolResults(msgspec.Struct, frozen=True, gc=False, tag="tool_results"):
    """One message holding the results of one reply's calls, in call order."""

    results: list[ToolResult]


Message = UserMessage | AssistantMessage | ToolResults


class Usage(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Tokens of one call (or a sum). `input_tokens` is the whole prompt, cached parts included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


class ModelStop(enum.StrEnum):
    """Why the model stopped generating, in neutral terms. `requires_action`: the API waits for
    an answer to something other than a tool call (a shell action, an MCP approval), which the
    loop cannot give."""

    end_turn = "end_turn"
    tool_use = "tool_use"
    max_tokens = "max_tokens"
    stop_sequence = "stop_sequence"
    refusal = "refusal"
    content_filter = "content_filter"
    pause = "pause"
    requires_action = "requires_action"
    other = "other"


class ModelResponse(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One reply of the model. `raw_stop` keeps the provider's own stop value when it matters."""

    content: list[Part]
    stop: ModelStop
    usage: Usage = Usage()
    raw_stop: str | None = None


def text_of(parts: list[Part]) -> str:
    """The visible text of a reply: its `Text` parts joined."""
    return "".join(p.text for p in parts if type(p) is Text)
