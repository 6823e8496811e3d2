"""The anyio side of the async executor: its inbox, its clock, how it tells a cancel of the
run from a call's own failure, and how it calls a model or a tool (awaited, or in a thread)."""

from __future__ import annotations

__all__ = [
    "Inbox",
    "approval",
    "cancelled",
    "event_loop_clock",
    "invoke",
    "is_async",
    "model_caller",
    "own_cancel",
    "tool",
]

import asyncio
import contextlib
import functools
import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.to_thread
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Observation,
    RunTool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
)

from ._effects import answer, returned
from ._invoke import ainvoke, failure
from ._protocols import AsyncModelClient, ModelClient, ToolRunner, takes
from ._session import Session
from ._toolbox import Toolbox


class Inbox:
    """The observations of finished tasks, each keyed by its command's id, in arrival order."""

    __slots__ = ("_items", "_ready")

    def __init__(self) -> None:
        self._items: deque[tuple[str, Observation]] = deque()
        self._ready: anyio.Event | None = None

    def put(self, key: str, obs: Observation) -> None:
        self._items.append((key, obs))
        self.wake()

    def wake(self) -> None:
        if self._ready is not None:
            self._ready.set()

    async def get(self) -> tuple[str, Observation] | None:
        """The next observation; None if woken without one (the alarm stepped the loop)."""
        if not self._items:
            self._ready = ready = anyio.Event()
            await ready.wait()
            self._ready = None
            if not self._items:
                return None
        return self._items.popleft()


def event_loop_clock() -> Callable[[], float]:
    """The running event loop's own clock, the one anyio's deadlines use (`anyio.current_time`
    finds it again at every call)."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not asyncio: trio
        import trio

        return trio.current_time


def is_async(fn: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  # an object whose __call__ is async
    )


def cancelled(exc: BaseException) -> bool:
    """Whether `exc` is the run being called off (a cancel from outside, Ctrl-C), alone or
    in a group."""
    kinds = (anyio.get_cancelled_exc_class(), KeyboardInterrupt)
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(kinds)[1] is None
    return isinstance(exc, kinds)


def own_cancel(exc: BaseException) -> bool:
    """Whether `exc` is a cancel that work raised of itself (a future it awaited was cancelled),
    no one cancelling this task: then it is the work's failure, not the run's end."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        if anyio.current_effective_deadline() == -math.inf:
            return False  # a scope around it is cancelled: the run's, a timeout's, the caller's
        with contextlib.suppress(RuntimeError):  # not asyncio: no task to ask
            task = asyncio.current_task()
            return task is None or not task.cancelling()  # .cancel(), asyncio.timeout
        return True
    return isinstance(exc, asyncio.CancelledError)  # under trio, asyncio's cancels nothing


def model_caller(
    model: AsyncModelClient | ModelClient, session: Session
) -> Callable[[CallModel], Awaitable[Any]]:
    """How to ask the model: awaited if it is async, else in a worker thread; with the
    caller's `on_update` for its deltas if it takes them. A thread that was abandoned (the
    run cancelled, the deadline passed) goes on: its deltas, stale, are no longer shown."""
    on_delta = session.on_delta
    if isinstance(model, AsyncModelClient) and getattr(model, "is_async", True):
        method: Callable[..., Any] = model.acomplete
        if on_delta is not None and takes(method, "on_delta"):
            return lambda c: method(c.request, on_delta=on_delta)
        return lambda c: method(c.request)
    sync: Callable[..., Any] = cast(ModelClient, model).complete
    if on_delta is not None and takes(sync, "on_delta"):
        show = on_delta  # the deltas come from the worker thread

        def streamed(c: CallModel) -> Awaitable[Any]:
            def shown(delta: Any) -> None:  # on the event loop's thread
                if not session.stale([c.id]):
                    show(delta)

            call = functools.partial(sync, on_delta=lambda d: anyio.from_thread.run_sync(shown, d))
            return anyio.to_thread.run_sync(call, c.request, abandon_on_cancel=True)

        return streamed
    return lambda c: anyio.to_thread.run_sync(sync, c.request, abandon_on_cancel=True)


async def invoke(
    command: RunTool, runner: ToolRunner, run_call: Callable[[RunTool], ToolOutcome], deps: Any
) -> ToolOutcome:
    """Async tools are awaited here; everything else runs in a worker thread."""
    tool = runner.get(command.name) if isinstance(runner, Toolbox) else None
    try:
        if tool is not None and tool.is_async:
            return await ainvoke(tool, command.arguments, ToolContext(command.id, deps))
        return await anyio.to_thread.run_sync(run_call, command, abandon_on_cancel=True)
    except BaseException as e:
        if not own_cancel(e):
            raise
        if tool is not None:
            return failure(tool, e)
        return ToolOutcome(f"{command.name} failed: {type(e).__name__}", True)  # a runner's


async def tool(
    command: RunTool,
    limit: float,
    runner: ToolRunner,
    run_call: Callable[[RunTool], ToolOutcome],
    deps: Any,
    now: Callable[[], float],
) -> Observation:
    """A tool call as an observation; one that runs past `limit` seconds ends in an error
    result naming it."""
    if limit == math.inf:
        return returned(command, await invoke(command, runner, run_call, deps), now())
    with anyio.move_on_after(limit):
        return returned(command, await invoke(command, runner, run_call, deps), now())
    return ToolReturned(command.id, f"{command.name} timed out after {limit:g} s", True, now=now())


async def approval(
    approve: Callable[[AwaitApproval], Any], command: AwaitApproval, now: Callable[[], float]
) -> Observation:
    """An approver's decision as an observation: awaited if it is async, else (a person at a
    prompt, say) in a worker thread, so other calls go on meanwhile."""
    if is_async(approve):
        decision = approve(command)
    else:  # a person at a prompt, say: other calls go on meanwhile
        decision = await anyio.to_thread.run_sync(approve, command, abandon_on_cancel=True)
    if inspect.isawaitable(decision):
        decision = await decision
    return answer(command, decision, now())
