"""The async executor, under asyncio or trio (on anyio): every command the loop hands out runs at
once, in one task group.

The core decides what may overlap (it only hands out calls that may run together); this driver
starts each command as a task and feeds the observations back as they arrive. Async tools and
async model clients are awaited; sync tools, sync model clients and sync approvers run in worker
threads, so the event loop (an asyncio web app's, say) never blocks. A per-tool timeout ends in
an error result naming it. The loop's deadline wakes the driver while every task is still busy.
When the run itself is cancelled (a cancel scope, `asyncio.timeout`, a cancelled task, Ctrl-C),
the loop is told, writes a result for every started call, and `run` returns `Finish(cancelled)`
instead of raising.

`updates(...)` runs the same inside an `async with` block and hands its `Update`s over as an
async iterator.
"""

from __future__ import annotations

__all__ = ["Updates", "run", "updates"]

import asyncio
import contextlib
import functools
import inspect
import math
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

from turnstile.core import (
    AwaitApproval,
    CallModel,
    Cancelled,
    Command,
    Event,
    Finish,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
    RunTool,
    Tick,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
    ToolStarted,
)
from turnstile.core.messages import Message

try:
    import anyio
    import anyio.from_thread
    import anyio.to_thread
except ModuleNotFoundError as error:
    from turnstile.providers._optional import missing_extra

    raise missing_extra(error, "aio", needed_by="turnstile.executors.aio") from None

from ._events import Update
from ._protocols import AsyncModelClient, ModelClient, ToolRunner, takes
from ._run import (
    JournalArg,
    Recorder,
    Run,
    answer,
    check_model,
    model_failed,
    opened,
    prepare,
    renamed_state,
)
from ._toolbox import Toolbox, as_runner, caller

Approver = Callable[[AwaitApproval], "bool | str | Awaitable[bool | str]"]
Work = Callable[[], Awaitable[Observation]]


async def run(
    spec: LoopSpec,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: AsyncModelClient | ModelClient,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    loop: Loop | None = None,
    journal: JournalArg = None,
    approve: Approver | None = None,
    tool_timeout: float | None = None,
    clock: Callable[[], float] | None = None,
    deps: Any = None,
    on_event: Callable[[Event], None] | None = None,
    on_update: Callable[[Update], object] | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
    state: Loop | None = None,
) -> Run:
    """Drive a loop under asyncio or trio until it finishes, or until only approvals are left to
    wait for.

    Arguments as for `sync.run`; `tool_timeout` applies to tools whose `ToolSpec` sets none.
    The calls the loop hands out together are journaled as started, and made durable, before
    the first of them runs. Times come from the event loop's clock (`anyio.current_time`), so
    `turnstile.executors.testing.run_async` makes timeouts, and the waits a retry's
    `CallModel.not_before` asks for, instant in tests (trio's `MockClock` does too, but its
    autojump also passes the time while a sync tool or client works in a thread).
    Raises `TypeError` at once for a `model` that is neither an `AsyncModelClient` nor a
    `ModelClient`.
    """
    check_model(model, can_await=True)
    resumed = renamed_state(loop, state)
    runner = as_runner(tools)
    run_call = caller(runner, deps)
    with opened(journal, resumed) as journaled:
        record, now = prepare(
            spec,
            runner,
            prompt,
            resumed,
            clock or _event_loop_clock(),
            journaled,
            on_event,
            on_update=on_update,
        )
        driver = _Driver(record, now, model, runner, run_call, approve, tool_timeout, deps)
        return await driver.drive(on_step)


class Updates:
    """A run's updates as an async iterator (see `updates`); `run` is its `Run` once it is
    over."""

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.run: Run | None = None

    def __aiter__(self) -> Updates:
        return self

    async def __anext__(self) -> Update:
        try:
            return cast(Update, await self._receive.receive())
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


@contextlib.asynccontextmanager
async def updates(
    spec: LoopSpec, prompt: str | Sequence[Message] | None = None, **options: Any
) -> AsyncIterator[Updates]:
    """Start `run(spec, prompt, **options)` and hand over its `Update`s as they happen:

        async with aio.updates(spec, prompt, model=client, tools=tools) as stream:
            async for update in stream:
                ...
        run = stream.run

    The iteration ends with the run. Leaving the block before that cancels the run (it
    finishes `cancelled`, its state valid), an error included; an error of the run, or of
    the block, is raised from the block as it is (not in an `ExceptionGroup`).
    """
    send, receive = anyio.create_memory_object_stream[Update](math.inf)
    stream = Updates(receive)
    given = options.pop("on_update", None)

    def show(update: Update) -> None:
        if given is not None:
            given(update)
        with contextlib.suppress(anyio.BrokenResourceError):  # the block was left: no one reads
            send.send_nowait(update)

    failed: list[Exception] = []  # raised as they are once the run is over, never in a group

    async def drive() -> None:
        with send:
            try:
                stream.run = await run(spec, prompt, on_update=show, **options)
            except Exception as e:  # the iteration ends, then the block raises it
                failed.append(e)

    async with anyio.create_task_group() as group:
        group.start_soon(drive)
        with receive:
            try:
                yield stream
            except Exception as e:  # the block's own error: the run is cancelled first
                failed.insert(0, e)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]


class _Inbox:
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


def _event_loop_clock() -> Callable[[], float]:
    """The running event loop's own clock, the one anyio's deadlines use (`anyio.current_time`
    finds it again at every call)."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not asyncio: trio
        import trio

        return trio.current_time


def _is_async(fn: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  # an object whose __call__ is async
    )


def _cancelled(exc: BaseException) -> bool:
    """Whether `exc` is the run being called off (a cancel from outside, Ctrl-C), alone or
    in a group."""
    kinds = (anyio.get_cancelled_exc_class(), KeyboardInterrupt)
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(kinds)[1] is None
    return isinstance(exc, kinds)


def _own_cancel(exc: BaseException) -> bool:
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


class _Driver:
    """One run's bookkeeping: the tasks in flight, keyed by command id, and what came back."""

    def __init__(
        self,
        record: Recorder,
        now: Callable[[], float],
        model: AsyncModelClient | ModelClient,
        runner: ToolRunner,
        run_call: Callable[[RunTool], ToolOutcome],
        approve: Approver | None,
        tool_timeout: float | None,
        deps: Any,
    ) -> None:
        self.record = record
        self.loop = record.loop
        self.now = now
        self.runner = runner
        self.run_call = run_call
        self.approve = approve
        self.tool_timeout = tool_timeout
        self.deps = deps
        self.timeouts = {
            t.name: t.timeout_s or tool_timeout or math.inf for t in self.loop.spec.tools
        }
        self.inbox = _Inbox()
        self.tasks: dict[str, anyio.CancelScope] = {}  # the work in flight, by command id
        self.launch: list[tuple[str, Work]] = []  # the work the loop handed out, not yet begun
        self.armed_for: float | None = None  # the deadline the alarm waits for
        self.rearm: anyio.Event | None = None  # set to make the alarm read the deadline again
        self.on_step: Callable[[Command | Observation], None] | None = None
        self.inline_key: str | None = None  # the work this task awaits itself, if any
        self.inline_scope = anyio.CancelScope()  # ...and its scope
        self.waiting: list[AwaitApproval] = []
        self.finish: Finish | None = None
        self.complete = self._client(model, record.delta, record.loop)

    @staticmethod
    def _client(
        model: AsyncModelClient | ModelClient,
        on_delta: Callable[[Any], object] | None,
        loop: Loop,
    ) -> Callable[[CallModel], Awaitable[Any]]:
        """How to ask the model: awaited if it is async, else in a worker thread; with the
        caller's `on_update` for its deltas if it takes them. A thread that was abandoned (the
        run cancelled, the deadline passed) goes on: its deltas are no longer shown."""
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
                    if loop.state.pending_model == c.id:
                        show(delta)

                call = functools.partial(
                    sync, on_delta=lambda d: anyio.from_thread.run_sync(shown, d)
                )
                return anyio.to_thread.run_sync(call, c.request, abandon_on_cancel=True)

            return streamed
        return lambda c: anyio.to_thread.run_sync(sync, c.request, abandon_on_cancel=True)

    # -- the work of one command -------------------------------------------------------------

    async def model_call(self, command: CallModel) -> Observation:
        now = self.now
        if command.not_before is not None:  # on the clock that stamps observations
            await anyio.sleep(max(command.not_before - now(), 0.0))
        self.record.calling(command)
        try:
            response = await self.complete(command)
        except BaseException as e:
            if isinstance(e, Exception) or _own_cancel(e):
                return model_failed(command.id, e, now())
            raise
        return ModelReplied(command.id, response, now=now())

    async def tool_call(self, command: RunTool) -> Observation:
        limit = self.timeouts.get(command.name, self.tool_timeout or math.inf)
        if limit == math.inf:
            outcome = await self._invoke(command)
            return ToolReturned(command.id, outcome.content, outcome.is_error, now=self.now())
        with anyio.move_on_after(limit):
            outcome = await self._invoke(command)
            return ToolReturned(command.id, outcome.content, outcome.is_error, now=self.now())
        return ToolReturned(
            command.id, f"{command.name} timed out after {limit:g} s", True, now=self.now()
        )

    async def _invoke(self, command: RunTool) -> ToolOutcome:
        """Async tools are awaited here; everything else runs in a worker thread."""
        runner = self.runner
        tool = runner.get(command.name) if isinstance(runner, Toolbox) else None
        try:
            if tool is not None and tool.is_async:
                return await tool.ainvoke(command.arguments, ToolContext(command.id, self.deps))
            return await anyio.to_thread.run_sync(self.run_call, command, abandon_on_cancel=True)
        except BaseException as e:
            if not _own_cancel(e):
                raise
            if tool is not None:
                return tool.failed(e)
            return ToolOutcome(f"{command.name} failed: {type(e).__name__}", True)  # a runner's

    async def approval(self, command: AwaitApproval) -> Observation:
        approve = self.approve
        assert approve is not None
        if _is_async(approve):
            decision = approve(command)
        else:  # a person at a prompt, say: other calls go on meanwhile
            decision = await anyio.to_thread.run_sync(approve, command, abandon_on_cancel=True)
        if inspect.isawaitable(decision):
            decision = await decision
        return answer(command, decision, self.now())

    async def inline(self) -> None:
        """Await the work handed out alone, and what follows it alone, in this task: one cancel
        scope for the lot, cancelled only if the alarm's `Tick` makes the work under way
        stale (then the loop has moved on without its result)."""
        launch, step = self.launch, self.step
        self.inline_scope = scope = anyio.CancelScope()
        with scope:
            while self.finish is None and len(launch) == 1 and not self.tasks:
                key, work = launch.pop()
                self.inline_key = key
                obs = await work()
                if self.inline_key != key:
                    break  # the alarm gave up on it as it came back
                self.inline_key = None
                step(obs)
        self.inline_key = None

    async def task(self, key: str, scope: anyio.CancelScope, work: Work) -> None:
        with scope:
            self.inbox.put(key, await work())

    # -- the loop ----------------------------------------------------------------------------

    def step(self, obs: Observation | None) -> None:
        """Hand `obs` to the loop (or begin) and queue what it decides in `launch`: calls are
        journaled as started, and everything made durable, before any of it runs."""
        record, now, on_step = self.record, self.now, self.on_step
        if obs is None:
            commands = record.first(now())
        else:
            commands = record.send(obs)
            if on_step is not None:  # once recorded: a dump taken there holds it
                on_step(obs)
        launch = self.launch
        queued = len(launch)
        work: Work
        for command in commands:
            match command:
                case Finish():
                    self.finish = command
                    continue
                case CallModel(id=key):
                    work = functools.partial(self.model_call, command)
                case RunTool(id=key):
                    record.send(ToolStarted(key, now=now()))
                    work = functools.partial(self.tool_call, command)
                case AwaitApproval(id=key) if self.approve is not None:
                    work = functools.partial(self.approval, command)
                case _:
                    self.waiting.append(command)  # type: ignore[arg-type]
                    continue
            launch.append((key, work))
        if len(launch) > queued:
            record.commit()
        if on_step is not None:  # once every call handed out is recorded as started
            for command in commands:
                on_step(command)
        self.abandon_stale()
        deadline = self.loop.next_deadline()
        if deadline != self.armed_for and self.rearm is not None:
            self.rearm.set()

    def abandon_stale(self) -> None:
        """Cancel work whose result the loop no longer waits for (it finished, or a guard gave
        up on a running round)."""
        tasks, inline = self.tasks, self.inline_key
        if not tasks and inline is None:
            return
        wanted = self.loop.outstanding_ids()
        for key in [k for k in tasks if k not in wanted]:
            tasks.pop(key).cancel()
        if inline is not None and inline not in wanted:
            self.inline_key = None
            self.inline_scope.cancel()

    async def alarm(self) -> None:
        """Wake the loop when its deadline is due, even while every task is still busy. The
        deadline moves as the run goes (time spent waiting only for a person does not count),
        so `step` re-arms this when it does; a `Tick` goes out only once the loop says its
        deadline has passed."""
        loop, now = self.loop, self.now
        while True:
            deadline = self.armed_for = loop.next_deadline()
            self.rearm = rearm = anyio.Event()
            if deadline is None:
                await rearm.wait()
                continue
            wait = max(deadline - now(), 1e-6)  # never a busy loop on a clock's rounding
            with anyio.CancelScope(deadline=anyio.current_time() + wait):
                await rearm.wait()
                continue
            if loop.deadline_passed(now()):
                self.step(Tick(now=now()))
                self.inbox.wake()

    async def drive(self, on_step: Callable[[Command | Observation], None] | None) -> Run:
        """Carry out the loop's commands until it finishes or only approvals are left. Work
        handed out alone, with nothing else in flight (a model call, a lone tool call), is
        awaited here, not in a task of its own: the common turn costs no task."""
        self.on_step = on_step
        if "trio" in sys.modules:  # a Ctrl-C must not land halfway through a step
            import trio

            self.step = trio.lowlevel.enable_ki_protection(self.step)  # type: ignore[method-assign]
        tasks, inbox, launch = self.tasks, self.inbox, self.launch
        try:
            async with anyio.create_task_group() as group:
                self.step(None)
                if self.finish is None and launch:
                    group.start_soon(self.alarm)
                while self.finish is None:
                    if len(launch) == 1 and not tasks:
                        await self.inline()
                        continue
                    for key, work in launch:
                        tasks[key] = scope = anyio.CancelScope()
                        group.start_soon(self.task, key, scope, work)
                    launch.clear()
                    if not tasks:
                        break
                    got = await inbox.get()
                    if got is not None and tasks.pop(got[0], None) is not None:
                        self.step(got[1])
                group.cancel_scope.cancel()
        except BaseException as exc:
            if self.finish is not None or not _cancelled(exc):
                raise
            self.step(Cancelled("the run was cancelled", now=self.now()))
        if self.finish is None and tasks:  # a task raised its backend's cancel (an approver's
            # own asyncio.CancelledError): the group cancelled itself and left without a word
            self.step(Cancelled("the run was cancelled", now=self.now()))
        return Run(self.loop, self.finish, self.waiting)
