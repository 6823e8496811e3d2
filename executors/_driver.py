"""The async executor's driver: one run's tasks in one group, the work handed out alone awaited
in the driving task itself, the deadline's alarm, and a run called off (`turnstile.executors.aio`
is its front)."""

from __future__ import annotations

__all__ = ["Approver", "Driver"]

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Cancelled,
    CheckGuardrail,
    InvalidObservation,
    ModelReplied,
    Observation,
    RunTool,
    ToolOutcome,
)

from ._effects import Decision, model_failed
from ._guardrails import Guardrails
from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._run import Run
from ._session import Session
from ._tasks import Inbox, Tasks, approval, cancelled, model_caller, own_cancel, tool

Approver = Callable[[AwaitApproval], "Decision | Awaitable[Decision]"]
Work = Callable[[], Awaitable[Observation]]


class Driver:
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
        rails: Guardrails | None = None,
    ) -> None:
        self.session = session
        self.now = session.now
        self.runner = runner
        self.run_call = run_call
        self.approve = approve
        self.tool_timeout = tool_timeout
        self.deps = deps
        self.rails = rails or Guardrails()
        tools = session.loop.spec.tools
        self.timeouts = {t.name: t.timeout_s or tool_timeout or math.inf for t in tools}
        self.group = Tasks()
        self.inbox = Inbox(self.group.trio)
        self.tasks: dict[str, Callable[[], object]] = {}  # what cancels the work in flight, by id
        self.launch: list[tuple[str, Work]] = []  # the work the loop handed out, not yet begun
        self.armed = False  # whether the alarm is to be set again when the deadline moves
        self.timer: Any = None  # the deadline's alarm (`Tasks.call_later`)
        self.failed: BaseException | None = None  # what stepping the loop raised in `ring`
        self.inline_key: str | None = None  # the work this task awaits itself, if any
        self.inline_scope: Any  # ...and the scope `driven` awaits it in (`Tasks.scope`)
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

    async def task(self, key: str, work: Work) -> None:
        try:
            obs = await work()
        except asyncio.CancelledError as e:
            if self.group.trio or not own_cancel(e):
                raise
            self.inbox.put(key, None)  # its own cancel (an approver's): the run is called off
            return
        self.inbox.put(key, obs)

    def step(self, obs: Observation | None) -> None:
        """Hand `obs` to the loop (or begin) and queue what it decides in `launch`: calls are
        journaled as started, and everything made durable, before any of it runs."""
        session = self.session
        commands = session.start() if obs is None else session.send(obs)
        for handed in session.hand_out(commands, self.approve is not None):
            self.launch.append((handed.id, self.work(handed)))
        self.abandon_stale()
        if self.armed and session.alarm_moved():
            self.arm()

    def work(self, command: CallModel | RunTool | AwaitApproval | CheckGuardrail) -> Work:
        """What carrying out `command` takes, not yet begun."""
        match command:
            case CallModel():
                return functools.partial(self.model_call, command)
            case RunTool(name=name):
                limit = self.timeouts.get(name, self.tool_timeout or math.inf)
                return functools.partial(
                    tool, command, limit, self.runner, self.run_call, self.deps, self.now
                )
            case CheckGuardrail():  # beside the model call, or the round's checks together
                return functools.partial(self.rails.acheck, command, self.now)
        assert self.approve is not None
        return functools.partial(approval, self.approve, command, self.now)

    def abandon_stale(self) -> None:
        """Cancel work whose result the loop no longer waits for (it finished, or a guard gave
        up on a running round)."""
        tasks, inline = self.tasks, self.inline_key
        if not tasks and inline is None:
            return
        for key in self.session.stale(tasks):
            tasks.pop(key)()
        if inline is not None and self.session.stale([inline]):
            self.inline_key = None
            self.inline_scope.cancel()

    def arm(self) -> None:
        """Set the alarm that wakes the loop when its deadline is due, even while every task is
        still busy: a timer (`ring`), not a task. The deadline moves as the run goes (time spent
        waiting only for a person does not count), so `step` sets it again when it does."""
        if self.timer is not None:
            self.timer.cancel()
        wait = self.session.alarm(1e-6)
        self.timer = None if wait is None else self.group.call_later(wait, self.ring)

    def ring(self) -> None:
        """The deadline is due: the session says whether a `Tick` goes out. What stepping the
        loop raises is the run's (raised where the driving task wakes, as an alarm task's
        would be), so that task is woken."""
        self.timer = None
        try:
            if (tick := self.session.tick()) is not None:
                self.step(tick)
            self.arm()
        except BaseException as e:
            self.failed = e
            if self.inline_key is not None:
                self.inline_key = None
                self.inline_scope.cancel()
        self.inbox.wake()

    def disarm(self) -> None:
        self.armed = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def drive(self) -> Awaitable[Run]:
        """Carry out the loop's commands until it finishes or only approvals are left; under
        trio, a Ctrl-C never lands halfway through a step."""
        if not self.group.trio:
            return self.driven()
        return self._ki_protected()

    async def _ki_protected(self) -> Run:
        import trio

        self.step = trio.lowlevel.enable_ki_protection(self.step)  # type: ignore[method-assign]
        try:
            return await self.driven()
        finally:  # a bound method kept on its own instance is a cycle: the run's whole state
            del self.step  # would wait for the garbage collector, which costs a run under load

    async def driven(self) -> Run:
        """`drive`: the run's tasks in one group. Work handed out alone, with nothing else in
        flight (a model call, a lone tool call), is awaited in this task, not in one of its
        own: the common turn costs no task. It is awaited in a cancel scope that lasts until
        the alarm's `Tick` makes such work stale (the loop moved on without its result) and
        cancels it; then the loop goes on in a new scope. Done when nothing is left to wait
        for but approvals, or the run was called off. An edit the loop refuses is raised once
        the rest in flight (a sibling sub-agent's child run, say) is done, not cancelled."""
        tasks, inbox, launch, session, step = (
            self.tasks,
            self.inbox,
            self.launch,
            self.session,
            self.step,
        )
        held: InvalidObservation | None = None  # a refused edit, while other work is in flight
        try:
            async with self.group as group:
                try:
                    step(None)
                    if session.finish is None and launch:
                        self.armed = True
                        self.arm()
                    done = False
                    while session.finish is None and not done:
                        self.inline_scope = scope = group.scope()
                        with scope:
                            while session.finish is None:
                                if len(launch) == 1 and not tasks:
                                    key, work = launch.pop()
                                    self.inline_key = key
                                    obs = await work()
                                    if self.inline_key != key:
                                        break  # the alarm gave up on it as it came back
                                    if self.failed is not None:
                                        raise self.failed
                                    self.inline_key = None
                                    step(obs)
                                    continue
                                for key, work in launch:
                                    tasks[key] = group.start(self.task, key, work)
                                launch.clear()
                                if not tasks:
                                    if held is not None:
                                        raise held
                                    done = True
                                    break
                                got = await inbox.get()
                                if self.failed is not None:
                                    raise self.failed
                                if got is not None and got[0] in tasks:
                                    if got[1] is None:
                                        done = True
                                        break
                                    del tasks[got[0]]
                                    try:
                                        step(got[1])
                                    except InvalidObservation as e:
                                        if not tasks:
                                            raise
                                        held = e  # raised once the rest in flight is done
                        self.inline_key = None
                        if self.failed is not None:
                            raise self.failed
                finally:  # the loop gave up on all of it, unless the run was called off
                    self.disarm()
                    for cancel in tasks.values():
                        cancel()
        except BaseException as exc:
            refused = _refused(exc)
            if refused is not None:  # the loop's refusal, as the sync executor raises it
                raise refused from None
            if session.finish is not None or not cancelled(exc):
                raise
            step(Cancelled("the run was cancelled", now=self.now()))
        # a task raised asyncio's cancel of its own (an approver's): the run is called off
        if session.finish is None and tasks:
            step(Cancelled("the run was cancelled", now=self.now()))
        return session.run()


def _refused(exc: BaseException) -> InvalidObservation | None:
    """What the loop refused (an approver's edit that does not fit), alone in the group the
    run's tasks raised it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, InvalidObservation) else None
