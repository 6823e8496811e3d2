"""The history: an append-only ledger of messages, its read-only views, and its rules checked."""

from __future__ import annotations

__all__ = ["History", "history_problems", "validate_history"]

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import overload

from ._errors import HistoryProblem, InvalidHistory
from ._messages import (
    AssistantMessage,
    Instructions,
    Message,
    ToolCall,
    ToolResults,
    UserMessage,
)


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

    def extends(self, other: History) -> bool:
        """True when this view shows all that `other` shows, and perhaps more: both show one
        ledger, this one at least as far. An encoder may then continue `other`'s wire form."""
        return self._items is other._items and self._n >= other._n

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


def history_problems(
    messages: Sequence[Message], *, allow_pending: bool = False
) -> list[HistoryProblem]:
    """Every rule `messages` breaks, in order; empty when the history is valid.

    Rules: it starts with a user message; no two user messages in a row; every tool call has
    exactly one result, in the `ToolResults` right after its reply; every result answers a call
    of that reply; a reply's call ids are unique. Two replies in a row are a paused reply and its
    continuation (providers send them as one turn), so only the second may call tools.
    `allow_pending` lets the last reply's calls still wait for results (a round in flight).
    `Instructions` may come anywhere but between a reply's calls and their results; the rules
    look through them.
    """
    problems: list[HistoryProblem] = []
    add = problems.append
    previous: Message | None = None
    open_calls: list[str] = []  # calls of the previous reply, still waiting for results
    for i, message in enumerate(messages):
        if type(message) is not ToolResults and open_calls:
            for call_id in open_calls:
                add(HistoryProblem(i, call_id, "tool call has no result before the next message"))
            open_calls = []
        if type(message) is UserMessage:
            if not message.content:
                add(HistoryProblem(i, None, "user message is empty"))
            if type(previous) is UserMessage:
                add(HistoryProblem(i, None, "two user messages in a row"))
        elif type(message) is AssistantMessage:
            if previous is None:
                add(HistoryProblem(i, None, "history starts with an assistant message"))
            for part in message.content:
                if type(part) is ToolCall:
                    if part.id in open_calls:
                        add(HistoryProblem(i, part.id, "tool call id is not unique in its reply"))
                    open_calls.append(part.id)
        elif type(message) is ToolResults:
            answered = Counter(r.call_id for r in message.results)
            if not message.results:
                add(HistoryProblem(i, None, "tool results message is empty"))
            elif type(previous) is not AssistantMessage:
                add(HistoryProblem(i, None, "tool results do not follow a reply with tool calls"))
            for call_id, count in answered.items():
                if call_id not in open_calls:
                    add(HistoryProblem(i, call_id, "result answers no call of the previous reply"))
                elif count > 1:
                    add(HistoryProblem(i, call_id, "tool call has more than one result"))
            for call_id in open_calls:
                if call_id not in answered:
                    add(HistoryProblem(i, call_id, "tool call has no result"))
            open_calls = []
        elif type(message) is Instructions:
            if not message.text:
                add(HistoryProblem(i, None, "instructions are empty"))
            continue  # the rules look through it
        else:
            add(HistoryProblem(i, None, f"not a message: {type(message).__name__}"))
        previous = message
    if open_calls and not allow_pending:
        for call_id in open_calls:
            add(HistoryProblem(len(messages) - 1, call_id, "tool call has no result"))
    return problems


def validate_history(messages: Sequence[Message], *, allow_pending: bool = False) -> None:
    """Raise `InvalidHistory` naming every broken rule (positions and call ids), or return."""
    problems = history_problems(messages, allow_pending=allow_pending)
    if problems:
        raise InvalidHistory(problems)
