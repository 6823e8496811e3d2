"""The wire form of a loop's history, kept between calls so each body costs only its new messages.

A loop sends its whole history on every call, and the history only grows: the request of turn
k+1 is the request of turn k plus a reply and its results. Each codec writes its messages as a
left fold (`fold(wire, messages)` appends to `wire`, and may replace, never change, the last
entry), so the wire form of a longer view is the cached one continued with the new messages.

Only `turnstile.core.messages.History` views are cached: views of one ledger agree on every message
they share, because the ledger only grows (`History`'s contract), and `History.extends` says when
one view continues another; an entry also checks the last message it folded is still in place.
Any other sequence is encoded whole.

A cache belongs to its user (each `Client` holds one; `encode(..., cache=...)` takes one), so it
lives as long as they do; it keeps at most `size` histories, the least recently used dropped
first. Without a cache, a codec folds the history whole.

The list returned is new on every call; its entries (and everything inside them) are shared with
the cache and with other bodies of the same history, so they are read-only: copy an entry before
changing it.
"""

from __future__ import annotations

__all__ = ["Fold", "WireCache", "folded"]

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core.messages import History, Message

Wire = list[dict[str, Any]]
Fold = Callable[[Wire, Iterable[Message]], None]


class _Entry:
    __slots__ = ("fold", "last", "n", "view", "wire")

    def __init__(self, fold: Fold, view: History) -> None:
        self.fold = fold
        self.view = view
        self.n = 0
        self.last: Message | None = None
        self.wire: Wire = []


class WireCache:
    """The wire forms of recent histories, each extended with the next call's new messages.

    One cache may serve several codecs: an entry belongs to the fold that wrote it. Thread-safe:
    an entry is taken out of the cache while it is extended, so two threads encoding the same
    history at once each get a correct body (one of them folds it whole).
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._entries: list[_Entry] = []  # the most recently used last
        self._lock = threading.Lock()

    def wire(self, fold: Fold, messages: Sequence[Message], head: Wire | None = None) -> Wire:
        """`head` followed by the wire form of `messages` as `fold` writes it, as a new list."""
        if type(messages) is not History:
            return folded(fold, messages, None, head)
        with self._lock:
            entry = self._take(fold, messages)
        if entry is not None and not messages.extends(entry.view):
            self._keep(entry)  # an older view: the loop has gone on, keep the longer one
            return folded(fold, messages, None, head)
        if entry is None or (entry.n and messages[entry.n - 1] is not entry.last):
            entry = _Entry(fold, messages)  # new, or its ledger was changed behind its back
        n = len(messages)
        fold(entry.wire, messages[entry.n : n])  # on an error the entry is dropped
        entry.n, entry.view = n, messages
        entry.last = messages[n - 1] if n else None
        out = list(head) if head else []
        out += entry.wire
        self._keep(entry)
        return out

    def _take(self, fold: Fold, messages: History) -> _Entry | None:
        """The entry `fold` wrote for the ledger `messages` shows, taken out; None if none."""
        for i in range(len(self._entries) - 1, -1, -1):
            entry = self._entries[i]
            if entry.fold is fold and (
                messages.extends(entry.view) or entry.view.extends(messages)
            ):
                return self._entries.pop(i)
        return None

    def _keep(self, entry: _Entry) -> None:
        """Keep `entry` as the one entry of its fold and ledger, the most recently used; where
        threads folded the same history at once, the longest of their entries stays."""
        with self._lock:
            for i, other in enumerate(self._entries):
                if other.fold is entry.fold and other.view.extends(entry.view):
                    return  # as long or longer: the cache already has it
                if other.fold is entry.fold and entry.view.extends(other.view):
                    del self._entries[i]
                    break
            self._entries.append(entry)
            if len(self._entries) > self._size:
                del self._entries[0]


def folded(
    fold: Fold, messages: Sequence[Message], cache: WireCache | None, head: Wire | None = None
) -> Wire:
    """`head` followed by the wire form of `messages`: continued from `cache` when there is one,
    else folded whole."""
    if cache is not None:
        return cache.wire(fold, messages, head)
    out = list(head) if head else []
    fold(out, messages)
    return out
