"""Commands: what the loop tells its executor to do next. Imperative, frozen, tagged."""

from __future__ import annotations

__all__ = [
    "AwaitApproval",
    "CallModel",
    "Command",
    "Finish",
    "History",
    "ModelRequest",
    "Purpose",
    "RunTool",
    "StopReason",
]

import enum
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import msgspec

from ._messages import Message
from ._spec import ToolSpec


class StopReason(enum.StrEnum):
    """Why a run ended. `unknown` is the initial value: no `Finish` ever carries it."""

    unknown = "unknown"
    completed = "completed"
    finish_tool = "finish_tool"
    stop_condition = "stop_condition"
    max_turns = "max_turns"
    deadline = "deadline"
    context_budget = "context_budget"
    repeated_call = "repeated_call"
    no_progress = "no_progress"
    tool_errors = "tool_errors"
    model_error = "model_error"
    max_tokens = "max_tokens"
    refusal = "refusal"
    cancelled = "cancelled"


class Purpose(enum.StrEnum):
    turn = "turn"
    finalize = "finalize"


class History(Sequence[Message]):
    """A read-only view of the first `n` messages of the loop's append-only ledger.

    Taking one costs O(1) whatever the history's length, and since the ledger only grows, the view
    never changes: a request keeps showing exactly what was sent.
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[Message], n: int | None = None) -> None:
        self._items = items
        self._n = len(items) if n is None else n

    def __len__(self) -> int:
        return self._n

    @property
    def ledger(self) -> object:
        """The append-only list this view shows the start of, for identity (`is`, `id`) only:
        views of one ledger agree on every message they share, so encoders may cache by it."""
        return self._items

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            if index.step in (None, 1):
                start, stop, _ = index.indices(self._n)
                return self._items[start:stop]  # copies the slice only, not the whole prefix
            return self._items[: self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("history index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))


class ModelRequest(msgspec.Struct, frozen=True, gc=False):
    """Everything one model call needs, in neutral form; providers encode it for the wire."""

    system: str | None
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    max_tokens: int
    purpose: Purpose = Purpose.turn


class Command(msgspec.Struct, frozen=True, gc=False, tag_field="type", forbid_unknown_fields=True):
    """Base of every command."""


class CallModel(Command, frozen=True, tag="call_model"):
    id: str
    request: ModelRequest


class RunTool(Command, frozen=True, tag="run_tool"):
    """Run one tool call; its `id` is the model's call id, echoed by `ToolReturned.call_id`."""

    id: str
    name: str
    arguments: dict[str, Any]


class AwaitApproval(Command, frozen=True, tag="await_approval"):
    """Ask a human whether the call `id` may run; answer with `Approved` or `Denied`."""

    id: str
    name: str
    arguments: dict[str, Any]


class Finish(Command, frozen=True, tag="finish"):
    """The run is over. `output`: the final text, or the finish tool's arguments."""

    reason: StopReason
    output: Any = None


AnyCommand = CallModel | RunTool | AwaitApproval | Finish
