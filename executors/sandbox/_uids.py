"""User ids for calls: each running call gets one no other running call has.

`RLIMIT_NPROC` counts the processes of a uid across the machine, so a uid shared by two calls
would split one process budget between them. A uid comes back once its call's work dir is
gone, and is reused last: a call never runs as the uid of the call just before it. The range
is offset by the host's pid, so two host processes on one machine rarely share uids either.
"""

from __future__ import annotations

__all__ = ["UIDS", "UidPool"]

import collections
import os
import threading

_FIRST = 3_000_000_000
_PER_HOST = 256


class UidPool:
    """Hands out distinct unprivileged uids, least recently returned first, waiting while
    all are in use."""

    def __init__(self) -> None:
        base = _FIRST + (os.getpid() % 1_000_000) * _PER_HOST
        self._free = collections.deque(range(base, base + _PER_HOST))
        self._ready = threading.Condition()

    def acquire(self) -> int:
        with self._ready:
            self._ready.wait_for(lambda: bool(self._free))
            return self._free.popleft()

    def release(self, uid: int) -> None:
        with self._ready:
            self._free.append(uid)
            self._ready.notify()


UIDS = UidPool()
"""The process-wide pool every sandbox draws from."""
