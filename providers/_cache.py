"""The wire form of a loop's history, kept between calls so each body costs only its new messages.

A loop sends its whole history on every call, and the history only grows: the request of turn
k+1 is the request of turn k plus a reply and its results. Each codec writes its messages as a
left fold (`fold(wire, messages)` appends to `wire`, and may replace, never change, the last
entry), so the wire form of a longer view is the cached one continued with the new messages.

Only `turnstile.core.History` views are cached: views of one ledger agree on every message they
share, because the ledger only grows (`History`'s contract), and `History.extends` says when one
view continues another; an entry also checks the last message it folded is still in place.
Any other sequence is encoded whole. At most `size` ledgers are kept,
the least recently used dropped first.

The list returned is new on every call; its entries (and everything inside them) are shared with
the cache and with other bodies of the same history, so they are read-only: copy an entry before
changing it.
"""

from __future__ import annotations

__all__ = ["WireCache"]

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core import History, Message

Wire = list[dict[str, Any]]


class _Entry:
    __slots__ = ("last", "n", "view", "wire")

    def __init__(self, view: History) -> None:
        self.view = view
        self.n = 0
        self.last: Message | None = None
        self.wire: Wire = []


class WireCache:
    """A codec's folds of recent histories, extended with each call's new messages.

    Thread-safe: an entry is taken out of the cache while it is extended, so two threads encoding
    the same history at once each get a correct body (one of them folds it whole).
    """

    def __init__(self, fold: Callable[[Wire, Iterable[Message]], None], size: int = 16) -> None:
        self._fold = fold
        self._size = size
        self._entries: list[_Entry] = []  # the most recently used last
        self._lock = threading.Lock()

    def wire(self, messages: Sequence[Message], head: Wire | None = None) -> Wire:
        """`head` followed by the wire form of `messages`, as a new list."""
        out = list(head) if head else []
        if type(messages) is not History:
            return out + self._whole(messages)
        with self._lock:
            entry = self._take(messages)
        if entry is not None and not messages.extends(entry.view):
            self._keep(entry)  # an older view: the loop has gone on, keep the longer one
            return out + self._whole(messages)
        if entry is None or (entry.n and messages[entry.n - 1] is not entry.last):
            entry = _Entry(messages)  # new, or its ledger was changed behind its back
        n = len(messages)
        self._fold(entry.wire, messages[entry.n : n])  # on an error the entry is dropped
        entry.n, entry.view = n, messages
        entry.last = messages[n - 1] if n else None
        out += entry.wire
        self._keep(entry)
        return out

    def _take(self, messages: History) -> _Entry | None:
        """The entry of the ledger `messages` shows, taken out; None when there is none."""
        for i in range(len(self._entries) - 1, -1, -1):
            entry = self._entries[i]
            if messages.extends(entry.view) or entry.view.extends(messages):
                return self._entries.pop(i)
        return None

    def _whole(self, messages: Iterable[Message]) -> Wire:
        wire: Wire = []
        self._fold(wire, messages)
        return wire

    def _keep(self, entry: _Entry) -> None:
        with self._lock:
            self._entries.append(entry)
            if len(self._entries) > self._size:
                del self._entries[0]
