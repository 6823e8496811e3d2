"""`LoopWorkflow`: a `Session` driven as the deterministic part of a Temporal workflow.

The workflow does Temporal's I/O and decides nothing: the work the session hands out starts at
once (a model call or a tool call as an activity, an approval as a wait for an `answer` update),
the deadline's alarm is a timer, and each result goes back stamped with `workflow.time()`.
Replaying a history feeds the same results to the same pure loop, which hands out the same
commands. A spec that names no tools is offered the worker's, asked for by an activity so the
history records them. Once the history is `Options.continue_after` events long, the run
continues as new from `loop.dump()` at a moment no activity runs, so histories stay small.
"""

from __future__ import annotations

__all__ = ["LoopWorkflow"]

import asyncio
from collections import deque
from collections.abc import Awaitable
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from msgspec.structs import replace
    from turnstile.core import (
        Approved,
        CallModel,
        Cancelled,
        CheckGuardrail,
        Denied,
        Loop,
        LoopSpec,
        Observation,
        RunTool,
        Tick,
        TurnstileError,
    )
    from turnstile.executors._served import carried_on
    from turnstile.executors._session import Session

    from ._activities import ask_guardrail, ask_model, ask_tool, ask_tool_specs
    from ._children import run_child
    from ._wire import WORKFLOW, ChildRun, Input, decode_input, encode, typed

# runs started before the workflow asked for the worker's tools replay without asking
WORKER_TOOLS = "worker-tools"
Key = str | int  # a command's id; the deadline's alarm is numbered


@workflow.defn(name=WORKFLOW, failure_exception_types=[TurnstileError])
class LoopWorkflow:
    """One run: `run(input, dump)` returns the finished loop's dump; `state` (a query) is the
    dump at any moment; `answer` (an update) approves or denies a call awaiting approval."""

    def __init__(self) -> None:
        self._session: Session | None = None
        self._inbox: deque[tuple[Key, Observation]] = deque()
        # what the loop waits on, with the task doing it (none for an approval): all it takes
        self._pending: dict[Key, asyncio.Task[None] | None] = {}
        self._asked: set[str] = set()
        self._alarm = 0

    @workflow.run
    async def run(self, given: bytes, dump: bytes) -> bytes:
        start = decode_input(given)
        options = start.options
        fresh = start.prompt is not None or start.resumed  # not continued as new
        if not start.spec.tools and fresh and not start.toolbox and workflow.patched(WORKER_TOOLS):
            offered = await ask_tool_specs(options)  # carried on if the run continues as new
            start = replace(start, spec=replace(start.spec, tools=offered))
        # a typed output's class, imported by its name outside the sandbox: the worker's own
        with workflow.unsafe.imports_passed_through():
            spec = typed(start.spec)
        session = self._session = Session(
            spec,
            start.prompt,
            loop=_loaded(spec, dump, start.fork),
            tool_specs=spec.tools,
            clock=workflow.time,
            # a new run's time starts at 0, as a replay's does; continued as new, it goes on
            offset=-workflow.time() if not dump else None if fresh else start.offset,
            log=False,  # a replay would log it all again
        )
        tools = {t.name: t for t in session.loop.spec.tools}
        commands = session.start(resume=start.resumed)
        try:
            while True:
                for command in session.hand_out(commands, approving=True):
                    if type(command) is RunTool:
                        self._start(command.id, self._run_tool(session, command, start, tools))
                    elif type(command) is CallModel:
                        self._start(command.id, self._call_model(session, command, start))
                    elif type(command) is CheckGuardrail:  # beside what it was handed out with
                        self._start(command.id, ask_guardrail(options, command))
                    else:  # an approval: an `answer` update brings it
                        self._asked.add(command.id)
                        self._pending[command.id] = None
                if session.finish is not None:
                    break
                commands = []
                self._arm(session)
                await workflow.wait_condition(lambda: bool(self._inbox))
                key, obs = self._inbox.popleft()
                if key not in self._pending:
                    continue  # abandoned, or an alarm set before the deadline moved
                del self._pending[key]
                if type(key) is str:
                    commands = session.send(replace(obs, now=session.now()))
                elif (tick := session.tick()) is not None:  # the alarm rang, the deadline passed
                    commands = session.send(tick)
                for stale in session.stale([k for k in self._pending if type(k) is str]):
                    self._asked.discard(stale)
                    self._drop(stale)
                if self._due(options.continue_after):
                    for key in list(self._pending):
                        self._drop(key)
                    carried = replace(
                        start, prompt=None, resumed=False, offset=session.offset, fork=b""
                    )
                    if session._fork is not None:  # a fork's log goes on with it
                        carried = replace(carried, fork=session._fork.carried())
                    workflow.continue_as_new(args=[encode(carried), session.loop.dump()])
        except asyncio.CancelledError:
            session.send(Cancelled("the workflow was cancelled", now=session.now()))
        for key in list(self._pending):
            self._drop(key)
        return session.loop.dump()

    @workflow.query
    def state(self) -> bytes:
        """The loop's dump as it is now (empty before the run begins)."""
        return b"" if self._session is None else self._session.loop.dump()

    @workflow.update
    def answer(
        self, call_id: str, approved: bool, reason: str, arguments: dict[str, Any] | None = None
    ) -> None:
        """A human's decision on the call `call_id`: approved (with `arguments` in place of the
        model's, if given), or denied for `reason`. (Histories from before edits send three.)"""
        self._asked.discard(call_id)
        obs = _answer(call_id, approved, reason, arguments)
        self._inbox.append((call_id, obs))

    @answer.validator
    def _awaited(
        self, call_id: str, approved: bool, reason: str, arguments: dict[str, Any] | None = None
    ) -> None:
        """Refuse, before the history records it, an answer the loop would refuse: to a call
        that awaits none, or an edit that does not fit (tried on a copy of the loop)."""
        if call_id not in self._asked:
            raise ValueError(f"the run awaits no approval of a call {call_id!r}")
        if approved and arguments is not None and self._session is not None:
            copy = Loop.load(self._session.loop.spec, self._session.loop.dump())
            copy.send(_answer(call_id, approved, reason, arguments, copy.state.events[-1].now))

    # -- tasks: activities and timers --------------------------------------------------------

    def _start(self, key: Key, work: Awaitable[Observation]) -> None:
        async def deliver() -> None:
            self._inbox.append((key, await work))

        self._pending[key] = asyncio.create_task(deliver())

    def _drop(self, key: Key) -> None:
        task = self._pending.pop(key, None)
        if task is not None:
            task.cancel()

    async def _run_tool(
        self, session: Session, command: RunTool, start: Input, tools: dict[str, Any]
    ) -> Observation:
        """A tool call as an activity; a sub-agent's, then its child run as a child workflow."""
        got = await ask_tool(start.options, tools.get(command.name), command, start.toolbox or "")
        if isinstance(got, ChildRun):
            return await run_child(session, command, got, start)
        return got

    async def _call_model(self, session: Session, command: CallModel, start: Input) -> Observation:
        if (wait := session.wait(command)) > 0:
            await workflow.sleep(wait)
        session.calling(command)
        return await ask_model(start.options, start.model, command)

    def _arm(self, session: Session) -> None:
        """A timer for the deadline's alarm, set again when the deadline moved (the session
        says when, and how long from now: at least a millisecond, for time stands still within
        a workflow task, so an alarm a rounding left short must not be set for that instant)."""
        if self._alarm in self._pending and not session.alarm_moved():
            return
        self._drop(self._alarm)
        wait = session.alarm(0.001)
        if wait is not None:
            self._alarm += 1
            self._start(self._alarm, _ring(wait))

    def _due(self, after: int) -> bool:
        """Whether to continue as new now: the history is `after` events long (or Temporal
        suggests it), no activity is running and no answer waits in the inbox (so the dump
        holds everything)."""
        info = workflow.info()
        if info.get_current_history_length() < after and not info.is_continue_as_new_suggested():
            return False
        busy = any(type(k) is str and task is not None for k, task in self._pending.items())
        return not busy and not any(key in self._pending for key, _ in self._inbox)


def _loaded(spec: LoopSpec, dump: bytes, fork: bytes) -> Loop | None:
    """The loop a run resumes from its dump, as a fork if it is one."""
    loop = Loop.load(spec, dump) if dump else None
    return carried_on(loop, fork) if loop is not None and fork else loop


def _answer(
    call_id: str, approved: bool, reason: str, arguments: dict[str, Any] | None, now: float = 0.0
) -> Approved | Denied:
    if approved:
        return Approved(call_id, arguments=arguments, now=now)
    return Denied(call_id, reason, now=now)


async def _ring(wait: float) -> Observation:
    await workflow.sleep(wait)
    return Tick(now=0.0)
