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

import contextlib
import functools
import math
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from turnstile.core import (
    AwaitApproval,
    CallModel,
    Cancelled,
    Command,
    Event,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
    RunTool,
    Tool,
    ToolOutcome,
)
from turnstile.core.messages import Message

try:
    import anyio
    import anyio.from_thread
    import anyio.to_thread
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "aio", needed_by="turnstile.executors.aio") from None

from ._agent import Agent, unpacked
from ._effects import JournalArg, check_model, model_failed, opened
from ._events import Update
from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._run import Run
from ._session import Session
from ._stream import Updates, streamed
from ._tasks import Inbox, approval, cancelled, event_loop_clock, model_caller, own_cancel, tool
from ._toolbox import as_runner, caller

Approver = Callable[[AwaitApproval], "bool | str | Awaitable[bool | str]"]
Work = Callable[[], Awaitable[Observation]]


def updates(
    spec: LoopSpec | Agent, prompt: str | Sequence[Message] | None = None, **options: Any
) -> contextlib.AbstractAsyncContextManager[Updates]:
    """Start `run(spec, prompt, **options)` and hand over its `Update`s as they happen:

        async with aio.updates(spec, prompt, model=client, tools=tools) as stream:
            async for update in stream:
                ...
        run = stream.run

    The iteration ends with the run. Leaving the block before that cancels the run (it
    finishes `cancelled`, its state valid), an error included; an error of the run, or of
    the block, is raised from the block as it is (not in an `ExceptionGroup`).
    """
    return streamed(run, spec, prompt, options)


async def run(
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: AsyncModelClient | ModelClient | str | None = None,
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
    `ModelClient`. A model string builds an async client.
    """
    spec, model, tools = unpacked(spec, model, tools, is_async=True)
    check_model(model, can_await=True)
    runner = as_runner(tools)
    run_call = caller(runner, deps)
    with opened(journal, loop) as journaled:
        session = Session(
            spec,
            prompt,
            loop=loop,
            tool_specs=runner.specs,
            clock=clock or event_loop_clock(),
            journal=journaled,
            on_event=on_event,
            on_update=on_update,
            on_step=on_step,
        )
        return await _Driver(session, model, runner, run_call, approve, tool_timeout, deps).drive()


class _Driver:
    """One run's bookkeeping: the tasks in flight, keyed by command id, and what came back."""

    def __init__(
        self,
        session: Session,
        model: AsyncModelClient | ModelClient,
        runner: ToolRunner,
        run_call: Callable[[RunTool], ToolOutcome],
        approve: Approver | None,
        tool_timeout: float | None,
        deps: Any,
    ) -> None:
        self.session = session
        self.now = session.now
        self.runner = runner
        self.run_call = run_call
        self.approve = approve
        self.tool_timeout = tool_timeout
        self.deps = deps
        tools = session.loop.spec.tools
        self.timeouts = {t.name: t.timeout_s or tool_timeout or math.inf for t in tools}
        self.inbox = Inbox()
        self.tasks: dict[str, anyio.CancelScope] = {}  # the work in flight, by command id
        self.launch: list[tuple[str, Work]] = []  # the work the loop handed out, not yet begun
        self.rearm: anyio.Event | None = None  # set to make the alarm read the deadline again
        self.inline_key: str | None = None  # the work this task awaits itself, if any
        self.inline_scope = anyio.CancelScope()  # ...and its scope
        self.complete = model_caller(model, session)

    async def model_call(self, command: CallModel) -> Observation:
        now = self.now
        if (wait := self.session.wait(command)) > 0:  # on the clock that stamps observations
            await anyio.sleep(wait)
        self.session.calling(command)
        try:
            response = await self.complete(command)
        except BaseException as e:
            if isinstance(e, Exception) or own_cancel(e):
                return model_failed(command.id, e, now())
            raise
        return ModelReplied(command.id, response, now=now())

    async def inline(self) -> None:
        """Await the work handed out alone, and what follows it alone, in this task: one cancel
        scope for the lot, cancelled only if the alarm's `Tick` makes the work under way
        stale (then the loop has moved on without its result)."""
        launch, step = self.launch, self.step
        self.inline_scope = scope = anyio.CancelScope()
        with scope:
            while self.session.finish is None and len(launch) == 1 and not self.tasks:
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

    def step(self, obs: Observation | None) -> None:
        """Hand `obs` to the loop (or begin) and queue what it decides in `launch`: calls are
        journaled as started, and everything made durable, before any of it runs."""
        session = self.session
        commands = session.start() if obs is None else session.send(obs)
        for handed in session.hand_out(commands, self.approve is not None):
            self.launch.append((handed.id, self.work(handed)))
        self.abandon_stale()
        if self.rearm is not None and session.alarm_moved():
            self.rearm.set()

    def work(self, command: CallModel | RunTool | AwaitApproval) -> Work:
        """What carrying out `command` takes, not yet begun."""
        match command:
            case CallModel():
                return functools.partial(self.model_call, command)
            case RunTool(name=name):
                limit = self.timeouts.get(name, self.tool_timeout or math.inf)
                return functools.partial(
                    tool, command, limit, self.runner, self.run_call, self.deps, self.now
                )
        assert self.approve is not None
        return functools.partial(approval, self.approve, command, self.now)

    def abandon_stale(self) -> None:
        """Cancel work whose result the loop no longer waits for (it finished, or a guard gave
        up on a running round)."""
        tasks, inline = self.tasks, self.inline_key
        if not tasks and inline is None:
            return
        for key in self.session.stale(tasks):
            tasks.pop(key).cancel()
        if inline is not None and self.session.stale([inline]):
            self.inline_key = None
            self.inline_scope.cancel()

    async def alarm(self) -> None:
        """Wake the loop when its deadline is due, even while every task is still busy. The
        deadline moves as the run goes (time spent waiting only for a person does not count),
        so `step` re-arms this when it does; the session says when a `Tick` goes out."""
        session = self.session
        while True:
            wait = session.alarm(1e-6)
            self.rearm = rearm = anyio.Event()
            if wait is None:
                await rearm.wait()
                continue
            with anyio.CancelScope(deadline=anyio.current_time() + wait):
                await rearm.wait()
                continue
            if (tick := session.tick()) is not None:
                self.step(tick)
                self.inbox.wake()

    async def drive(self) -> Run:
        """Carry out the loop's commands until it finishes or only approvals are left. Work
        handed out alone, with nothing else in flight (a model call, a lone tool call), is
        awaited here, not in a task of its own: the common turn costs no task."""
        if "trio" in sys.modules:  # a Ctrl-C must not land halfway through a step
            import trio

            self.step = trio.lowlevel.enable_ki_protection(self.step)  # type: ignore[method-assign]
        tasks, inbox, launch = self.tasks, self.inbox, self.launch
        try:
            async with anyio.create_task_group() as group:
                self.step(None)
                if self.session.finish is None and launch:
                    group.start_soon(self.alarm)
                while self.session.finish is None:
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
            if self.session.finish is not None or not cancelled(exc):
                raise
            self.step(Cancelled("the run was cancelled", now=self.now()))
        # a task raised its backend's cancel (an approver's own asyncio.CancelledError): the
        # group cancelled itself and left without a word
        if self.session.finish is None and tasks:
            self.step(Cancelled("the run was cancelled", now=self.now()))
        return self.session.run()
