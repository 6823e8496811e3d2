"""Async tests on virtual time: an event loop whose clock jumps ahead once everything waits."""

from __future__ import annotations

__all__ = ["run_async"]

import math
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, Literal, TypeVar, TypeVarTuple

from turnstile.providers.extras import required

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def run_async(
    fn: Callable[[], Awaitable[T]], *, backend: Literal["asyncio", "trio"] = "asyncio"
) -> T:
    """Run `fn()` under `backend` (with anyio) on a clock that starts at 0, stands still while
    anything runs (a worker thread included: anyio's or trio's `to_thread` on their default
    limiter, `asyncio.to_thread`, the loop's executor) and jumps to the next time something
    waits for (a sleep, a timeout, a deadline, a retry's wait) once everything waits: tests of
    timeouts and deadlines pass at once, and the times a run records are exact. (trio's
    `MockClock` autojump takes a running worker thread for idleness; this does not. Real I/O
    waited for, a socket's or a subprocess's, is waiting: time may jump past it.)"""
    anyio: Any = required("anyio", "aio", needed_by="run_async")

    if backend == "trio":  # anyio before 4.14 drops a trio clock given in backend_options
        import trio

        return trio.run(fn, clock=_trio_time())
    if backend == "asyncio":
        return anyio.run(fn, backend="asyncio", backend_options={"loop_factory": _asyncio_time()})
    raise ValueError(f"unknown backend {backend!r}: use 'asyncio' or 'trio'")


def _trio_time() -> Any:
    """`run_async`'s clock under trio (a `trio.abc.Clock`)."""
    import trio

    class Time(trio.abc.Clock):
        def __init__(self) -> None:
            self.now = 0.0

        def start_clock(self) -> None:
            pass

        def current_time(self) -> float:
            return self.now

        def deadline_to_sleep_time(self, deadline: float) -> float:
            running = trio.to_thread.current_default_thread_limiter().borrowed_tokens
            if running or deadline == math.inf:
                return math.inf  # a thread that finishes wakes the run loop
            self.now = max(self.now, deadline)
            return 0.0

    return Time()


def _asyncio_time() -> Any:
    """`run_async`'s event loop under asyncio: its `time()` is virtual, and a wait in its
    selector with nothing ready and no worker thread busy (anyio's, or its own executor's:
    `asyncio.to_thread`, which the SDKs use) moves that time on instead."""
    import asyncio

    import anyio.to_thread

    class Loop(asyncio.SelectorEventLoop):
        def __init__(self) -> None:
            super().__init__()
            self._virtual = 0.0
            self._in_executor = 0  # calls in its executor not yet back (asyncio.to_thread's)
            select = self._selector.select  # type: ignore[attr-defined]

            def jumping(timeout: float | None = None) -> Any:
                if timeout is None or timeout <= 0 or self._threads_busy():
                    return select(timeout)
                ready = select(0)
                if not ready:
                    self._virtual += timeout
                return ready

            self._selector.select = jumping  # type: ignore[attr-defined]

        def time(self) -> float:
            return self._virtual

        def run_in_executor(
            self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
        ) -> asyncio.Future[T]:
            future = super().run_in_executor(executor, func, *args)
            self._in_executor += 1
            future.add_done_callback(self._back_from_executor)
            return future

        def _back_from_executor(self, _: Any) -> None:
            self._in_executor -= 1

        def _threads_busy(self) -> bool:
            if self._in_executor:
                return True
            try:
                return bool(anyio.to_thread.current_default_thread_limiter().borrowed_tokens)
            except RuntimeError:  # before anyio has run here: no thread of its
                return False

    return Loop
