"""The event loop side of the async executor: its tasks and inbox (on the running loop's own
primitives), its clock, how it tells a cancel of the run from a call's own failure, and how it
calls a model or a tool (awaited, or in a thread)."""

from __future__ import annotations

__all__ = [
    "Inbox",
    "Tasks",
    "approval",
    "cancelled",
    "event_loop_clock",
    "is_async",
    "lazy_caller",
    "model_caller",
    "own_cancel",
    "tool",
]

import asyncio
import contextlib
import contextvars
import functools
import heapq
import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.to_thread
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Event,
    Observation,
    RunTool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
)

from ._effects import answer, has_method, is_async, returned
from ._invoke import ainvoke, failure
from ._protocols import AsyncModelClient, ModelClient, ToolRunner, takes
from ._session import Session
from ._toolbox import Toolbox, caller

_anyio_task_states: Any = {}  # where anyio keeps a task's cancel scopes on asyncio (`_shielded`)
with contextlib.suppress(ImportError, AttributeError):  # another anyio: its shields go unseen
    from anyio._backends import _asyncio as _anyio_asyncio

    _anyio_task_states = _anyio_asyncio._task_states


class Tasks:
    """A run's tasks, in the running event loop's own task group (asyncio's `TaskGroup`, a trio
    nursery), its timers and cancel scopes: anyio's cost a task several times what the event
    loop's do, and a run under load starts one a tool call. Leaving the group on an error or a
    cancel, cancel every task first (`start`), as anyio's group would."""

    __slots__ = ("_group", "_started", "trio")

    def __init__(self) -> None:
        self._group: Any
        self.trio = _on_trio()
        if self.trio:
            import trio

            self._group = trio.open_nursery()
        else:
            self._group = asyncio.TaskGroup()
        self._started: Any = None

    async def __aenter__(self) -> Tasks:
        self._started = await self._group.__aenter__()  # the TaskGroup, or the nursery
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return cast("bool | None", await self._group.__aexit__(*exc_info))

    def start(self, fn: Callable[..., Awaitable[object]], *args: Any) -> Callable[[], object]:
        """Start `fn(*args)` as a task and return what cancels it: a cancel that holds (trio's
        scope; on asyncio, `_Held`), not asyncio's one-shot `Task.cancel`, so work that catches
        it and awaits more is cancelled again."""
        if self.trio:
            import trio

            scope = trio.CancelScope()
            self._started.start_soon(_scoped, scope, fn, args)
            return cast("Callable[[], object]", scope.cancel)
        return _Held(self._started.create_task(fn(*args)))

    def call_later(self, wait: float, fn: Callable[[], object]) -> Any:
        """Call `fn` in `wait` seconds, from the event loop (asyncio's timers; on trio, `_Alarms`):
        no task of its own. What it returns has `cancel()`."""
        if self.trio:
            return _Alarms.here().call_later(wait, fn)
        return asyncio.get_running_loop().call_later(wait, fn)

    def scope(self) -> Any:
        """A cancel scope for the driving task's own awaits: trio's; on asyncio, `_Interrupt`."""
        if self.trio:
            import trio

            return trio.CancelScope()
        return _Interrupt()


class _Timer:
    """trio: a call of `fn` due `when`, in the context it was set in (as asyncio's timers)."""

    __slots__ = ("alarms", "cancelled", "context", "fn", "when")

    def __init__(self, alarms: _Alarms, when: float, fn: Callable[[], object]) -> None:
        self.alarms, self.when, self.fn, self.cancelled = alarms, when, fn, False
        self.context = contextvars.copy_context()

    def __lt__(self, other: _Timer) -> bool:
        return self.when < other.when

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.alarms.cancelled += 1


class _Alarms:
    """trio: timers, as asyncio's `call_later`, served by one system task for the whole trio run
    (trio has none): a run's deadline alarm costs an entry in a heap, not a task of its own with
    its scopes. A timer's function must not raise (the driver's hands on what it catches)."""

    def __init__(self) -> None:
        import trio

        self.heap: list[_Timer] = []
        self.cancelled = 0  # cancelled timers still in the heap
        self.changed = trio.Event()
        self.clock = trio.lowlevel.current_clock()

    @staticmethod
    def here() -> _Alarms:
        """This trio run's timers, their task started on first use."""
        import trio

        global _ALARMS
        if _ALARMS is None:
            _ALARMS = trio.lowlevel.RunVar("turnstile_alarms")
        try:
            return cast(_Alarms, _ALARMS.get())
        except LookupError:
            alarms = _Alarms()
            _ALARMS.set(alarms)
            trio.lowlevel.spawn_system_task(alarms.serve, name="turnstile alarms")
            return alarms

    def call_later(self, wait: float, fn: Callable[[], object]) -> _Timer:
        timer = _Timer(self, self.clock.current_time() + wait, fn)
        heap = self.heap
        if self.cancelled > 64 and self.cancelled * 2 > len(heap):  # as asyncio's loop does
            heap[:] = [t for t in heap if not t.cancelled]
            heapq.heapify(heap)
            self.cancelled = 0
        heapq.heappush(heap, timer)
        if heap[0] is timer:
            self.changed.set()
        return timer

    async def serve(self) -> None:
        import trio

        heap = self.heap
        while True:
            now = self.clock.current_time()
            while heap and (heap[0].cancelled or heap[0].when <= now):
                timer = heapq.heappop(heap)
                if timer.cancelled:
                    self.cancelled -= 1
                else:
                    timer.cancelled = True
                    timer.context.run(timer.fn)
            self.changed = trio.Event()
            with trio.CancelScope(deadline=heap[0].when if heap else math.inf):
                await self.changed.wait()


_ALARMS: Any = None  # trio's RunVar of `_Alarms`, made on first use (trio is imported then)


async def _scoped(scope: Any, fn: Callable[..., Awaitable[object]], args: tuple[Any, ...]) -> None:
    with scope:
        await fn(*args)


class _Held:
    """asyncio: cancels a task, and cancels it again each turn of the event loop until it ends,
    as anyio's scopes do, but never inside a scope of anyio's that shields it. A scope of
    anyio's costs a task more than the task itself (11 µs); this costs nothing until called."""

    __slots__ = ("_base", "_called", "_ended", "_sent", "_task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self._task, self._base = task, None
        self._called = self._ended = False
        self._sent = 0  # how many cancels this sent

    def __call__(self) -> None:
        if not self._called:
            self._called = True
            self._again()

    def _again(self) -> None:
        task = self._task
        if self._ended or task.done():
            return
        loop = task.get_loop()
        if _shielded(task, self._base):  # looked at again shortly: time may jump meanwhile
            loop.call_later(1e-3, self._again)
            return
        if not task._must_cancel and task is not asyncio.current_task():  # type: ignore[attr-defined]
            task.cancel()
            self._sent += 1
        loop.call_soon(self._again)


class _Interrupt(_Held):
    """asyncio: a scope in which the task's awaits are cancelled (`cancel`), and held so, the
    cancel ending the scope and no further, as `asyncio.timeout` does it; a cancel from
    elsewhere goes on out. Only anyio's shields inside the scope count."""

    __slots__ = ("_cancelling",)

    def __init__(self) -> None:
        pass  # `__enter__` sets it up, in the task

    def __enter__(self) -> _Interrupt:
        task = cast("asyncio.Task[Any]", asyncio.current_task())
        _Held.__init__(self, task)
        self._base = getattr(_anyio_task_states.get(task), "cancel_scope", None)
        self._cancelling = task.cancelling()
        return self

    cancel = _Held.__call__

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        self._ended = True  # a cancel once it is left does nothing
        if not self._sent:
            return False
        for _ in range(self._sent):
            self._task.uncancel()
        return kind is asyncio.CancelledError and self._task.cancelling() <= self._cancelling


def _shielded(task: asyncio.Task[Any], base: Any) -> bool:
    """Whether `task` is inside a scope of anyio's, within `base`, that shields it from cancels
    (anyio keeps a task's scopes in its asyncio backend's `_task_states`)."""
    scope = getattr(_anyio_task_states.get(task), "cancel_scope", None)
    while scope is not None and scope is not base:
        if getattr(scope, "_shield", False):
            return True
        scope = getattr(scope, "_parent_scope", None)
    return False


def _on_trio() -> bool:
    """Whether the running event loop is trio's (anyio runs on asyncio or trio)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


class Inbox:
    """The observations of finished tasks, each keyed by its command's id, in arrival order.
    The driving task waits for them parked on the event loop's own lowest primitive (a future;
    trio's `wait_task_rescheduled`), not on an event made for each wait."""

    __slots__ = ("_items", "_lowlevel", "_parked")

    def __init__(self, on_trio: bool) -> None:
        self._items: deque[tuple[str, Observation | None]] = deque()
        self._parked: Any = None  # the future awaited, or the trio task parked
        self._lowlevel: Any = None  # trio's lowlevel module, on trio
        if on_trio:
            import trio

            self._lowlevel = trio.lowlevel

    def put(self, key: str, obs: Observation | None) -> None:
        self._items.append((key, obs))
        self.wake()

    def wake(self) -> None:
        parked = self._parked
        if parked is None:
            return
        self._parked = None
        if self._lowlevel is not None:
            self._lowlevel.reschedule(parked)
        elif not parked.done():
            parked.set_result(None)

    async def get(self) -> tuple[str, Observation | None] | None:
        """The next observation (None for work that raised a cancel of its own); None if woken
        without one (the alarm stepped the loop)."""
        if not self._items:
            if self._lowlevel is not None:
                self._parked = self._lowlevel.current_task()
                await self._lowlevel.wait_task_rescheduled(self._abort)
            else:
                self._parked = future = asyncio.get_running_loop().create_future()
                try:
                    await future
                finally:
                    self._parked = None
            if not self._items:
                return None
        return self._items.popleft()

    def _abort(self, raise_cancel: object) -> Any:
        """trio: the parked task is cancelled; no one may wake it now."""
        self._parked = None
        return self._lowlevel.Abort.SUCCEEDED


def event_loop_clock() -> Callable[[], float]:
    """The running event loop's own clock, the one anyio's deadlines use (`anyio.current_time`
    finds it again at every call)."""
    if not _on_trio():
        return asyncio.get_running_loop().time
    import trio

    return trio.lowlevel.current_clock().current_time  # `trio.current_time` finds it each call


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
    can_await = has_method(model, "acomplete") or isinstance(model, AsyncModelClient)
    if can_await and getattr(model, "is_async", True):
        method: Callable[..., Any] = cast(AsyncModelClient, model).acomplete
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


def lazy_caller(
    runner: ToolRunner, deps: Any, history: Callable[[], Sequence[Event]] | None = None
) -> Callable[[RunTool], ToolOutcome]:
    """`caller(runner, deps)`, made when a call first needs it (a sync tool, a runner's call):
    a run of async tools never does, and asking what a runner's `run` takes costs a run more
    than the rest of its start. A runner that checks its deps is still asked at once."""
    if deps is not None and hasattr(runner, "check_deps"):
        return caller(runner, deps, history)
    made: list[Callable[[RunTool], ToolOutcome]] = []

    def call(command: RunTool) -> ToolOutcome:
        if not made:  # in a worker thread: two threads making it at once make the same
            made.append(caller(runner, deps, history))
        return made[0](command)

    return call


async def tool(
    command: RunTool,
    limit: float,
    runner: ToolRunner,
    run_call: Callable[[RunTool], ToolOutcome],
    deps: Any,
    now: Callable[[], float],
) -> Observation:
    """A tool call as an observation: async tools awaited here, everything else in a worker
    thread; one that runs past `limit` seconds ends in an error result naming it."""
    if limit != math.inf:
        with anyio.move_on_after(limit):
            return await tool(command, math.inf, runner, run_call, deps, now)
        return ToolReturned(
            command.id, f"{command.name} timed out after {limit:g} s", True, now=now()
        )
    found = runner.get(command.name) if isinstance(runner, Toolbox) else None
    try:
        if found is not None and found.is_async:
            outcome = await ainvoke(found, command.arguments, ToolContext(command.id, deps))
        else:
            outcome = await anyio.to_thread.run_sync(run_call, command, abandon_on_cancel=True)
    except BaseException as e:
        if not own_cancel(e):
            raise
        if found is not None:
            outcome = failure(found, e)
        else:  # a runner's
            outcome = ToolOutcome(f"{command.name} failed: {type(e).__name__}", True)
    return returned(command, outcome, now())


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
