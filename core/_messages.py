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
    "Audio",
    "Document",
    "Image",
    "Instructions",
    "Message",
    "ModelResponse",
    "ModelStop",
    "Opaque",
    "Part",
    "ResultPart",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "ToolResults",
    "Usage",
    "UserMessage",
    "UserPart",
    "text_of",
]

import enum
from collections.abc import Sequence
from typing import Annotated, Any, Literal

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


def _one_source(part: Image | Document) -> None:
    """A media part comes from exactly one place; inline data says what it is."""
    sources = sum(x is not None for x in (part.data, part.url, part.file_id))
    if sources != 1:
        raise ValueError(f"{type(part).__name__.lower()}: give one of data, url, file_id")
    if part.data is not None and not part.media_type:
        raise ValueError(f"{type(part).__name__.lower()}: inline data needs its media_type")


class Image(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="image"):
    """An image shown to the model: inline `data` with its `media_type` (image/png...), a
    `url`, or a `file_id` the provider holds. `detail` is OpenAI's resolution hint."""

    media_type: str | None = None
    data: bytes | None = None
    url: str | None = None
    file_id: str | None = None
    detail: str | None = None
    provider_data: Any = None

    def __post_init__(self) -> None:
        _one_source(self)


class Document(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="document"):
    """A document (PDF, plain text...): inline `data` with its `media_type`, a `url`, or a
    provider's `file_id`; `name` is its file name, `title` what the model is told it is."""

    media_type: str | None = None
    data: bytes | None = None
    url: str | None = None
    file_id: str | None = None
    name: str | None = None
    title: str | None = None
    provider_data: Any = None

    def __post_init__(self) -> None:
        _one_source(self)


class Audio(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="audio"):
    """Sound for the model to hear: inline `data` and its `media_type` (audio/wav, audio/mpeg)."""

    data: bytes
    media_type: str
    provider_data: Any = None


class Opaque(msgspec.Struct, frozen=True, gc=False, tag="opaque"):
    """A block or item of one wire `format` ("anthropic_messages", "openai_chat",
    "openai_responses") with no neutral form (a server tool's call or result, a type newer than
    the codec): kept verbatim and sent back as it came, in that format only."""

    format: str
    data: dict[str, Any]


UserPart = Text | Image | Document | Audio | Opaque
"""What a user message may hold."""

ResultPart = Text | Image | Document | Opaque
"""What a tool result may hold."""


class ToolResult(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="tool_result"):
    """The result of the call `call_id`: text, or parts (a tool may return images)."""

    call_id: str
    content: str | list[ResultPart]
    is_error: bool = False


Part = Text | Thinking | ToolCall | Opaque
"""What a reply may hold."""


class UserMessage(msgspec.Struct, frozen=True, gc=False, tag="user"):
    """What the user said: text, or parts (text, images, documents, audio)."""

    content: str | list[UserPart]


class AssistantMessage(msgspec.Struct, frozen=True, gc=False, tag="assistant"):
    content: list[Part]


class ToolResults(msgspec.Struct, frozen=True, gc=False, tag="tool_results"):
    """One message holding the results of one reply's calls, in call order."""

    results: list[ToolResult]


class Instructions(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag="instructions"):
    """Instructions given in the middle of a conversation, as a system message (`developer`:
    OpenAI's name for it with reasoning models); a format without them refuses to send one."""

    text: str
    role: Literal["system", "developer"] = "system"


Message = UserMessage | AssistantMessage | ToolResults | Instructions


Count = Annotated[int, msgspec.Meta(ge=0)]
"""A number of tokens: a negative one would lower a run's cost and context size."""


class Usage(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Tokens of one call (or a sum). `input_tokens` is the whole prompt, cached parts included."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    reasoning_tokens: Count = 0

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
    """One reply of the model. `raw_stop` keeps the provider's own stop value when it matters;
    `id` and `model` are the provider's id of the reply and the model that wrote it, as it says
    (a dated version of the one asked for, say), when it says."""

    content: list[Part]
    stop: ModelStop
    usage: Usage = Usage()
    raw_stop: str | None = None
    id: str | None = None
    model: str | None = None


def text_of(parts: str | Sequence[Part | UserPart]) -> str:
    """The visible text of a reply (or a user message, a result): its `Text` parts joined."""
    if isinstance(parts, str):
        return parts
    return "".join(p.text for p in parts if type(p) is Text)
