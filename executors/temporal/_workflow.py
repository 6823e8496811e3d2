"""`LoopWorkflow`: a `Loop` as the deterministic part of a Temporal workflow.

The workflow is an executor like trio's: every command the loop hands out starts at once (a
model call or a tool call as an activity, an approval as a wait for an `answer` update) and each
result goes back to the loop stamped with `workflow.time()`. It decides nothing: replaying a
history feeds the same results to the same pure loop, which hands out the same commands. A spec
that names no tools is offered the worker's, as the other executors offer their runner's: the
workflow asks a worker for their specs by an activity, so the history records them.

A tool activity that never reports back (its worker died) is tried again only for a replay-safe
tool; any other gets the result the core gives a call a crash interrupted. Once the history is
`Options.continue_after` events long, the run continues as new from `loop.dump()` at a moment no
activity runs, so histories stay small.
"""

from __future__ import annotations

__all__ = ["LoopWorkflow"]

import asyncio
from collections import deque
from collections.abc import Awaitable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import msgspec
    from turnstile.core import (
        Approved,
        AwaitApproval,
        CallModel,
        Cancelled,
        Command,
        Denied,
        Finish,
        Loop,
        ModelFailed,
        Observation,
        Resumed,
        RunTool,
        Tick,
        ToolReturned,
        ToolSpec,
        ToolStarted,
        TurnstileError,
    )
    from turnstile.core.state import INTERRUPTED

    from ._wire import (
        MODEL_ACTIVITY,
        SPECS_ACTIVITY,
        TOOL_ACTIVITY,
        WORKFLOW,
        Input,
        Options,
        decode_input,
        decode_outcome,
        decode_specs,
        encode,
        typed,
    )

# runs started before the workflow asked for the worker's tools replay without asking
WORKER_TOOLS = "worker-tools"
Key = tuple[str, str]  # ("model" | "tool" | "approval" | "tick", id)


@workflow.defn(name=WORKFLOW, failure_exception_types=[TurnstileError])
class LoopWorkflow:
    """One run: `run(input, dump)` returns the finished loop's dump; `state` (a query) is the
    dump at any moment; `answer` (an update) approves or denies a call awaiting approval."""

    def __init__(self) -> None:
        self._loop: Loop | None = None
        self._inbox: deque[tuple[Key, Observation]] = deque()
        self._pending: set[Key] = set()  # what the loop waits on; results of the rest are dropped
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._asked: set[str] = set()
        self._ticks = 0
        self._armed_for: float | None = None
        self._offset = 0.0

    @workflow.run
    async def run(self, given: bytes, dump: bytes) -> bytes:
        start = decode_input(given)
        self._options = start.options
        self._model = start.model
        tools: tuple[ToolSpec, ...] = ()
        starting = start.prompt is not None or start.resumed  # not a continue-as-new
        if not start.spec.tools and starting and workflow.patched(WORKER_TOOLS):
            tools = await self._worker_tools()  # carried on if the run continues as new
            start = msgspec.structs.replace(
                start, spec=msgspec.structs.replace(start.spec, tools=tools)
            )
        # a typed output's class, imported by its name outside the sandbox: the worker's own
        with workflow.unsafe.imports_passed_through():
            spec = typed(start.spec)
        loop = self._loop = Loop.load(spec, dump) if dump else Loop(spec)
        self._tools = {t.name: t for t in loop.spec.tools}
        if not dump:  # a new run's time starts at 0, as a replay's does
            self._offset = -workflow.time()
        elif start.resumed or start.prompt is not None:  # a dump from elsewhere: its time
            self._offset = loop.resume_offset(workflow.time())  # goes on from its last event
        else:  # continued as new: the same clock
            self._offset = start.offset
        if start.prompt is not None:
            commands = loop.start(start.prompt, self._now(), tools)
        elif start.resumed:
            commands = loop.send(Resumed(now=self._now()))
        else:
            commands = loop.outstanding_commands()
        try:
            while self._launch(commands) is None:
                commands = []
                self._arm()
                await workflow.wait_condition(lambda: bool(self._inbox))
                key, obs = self._inbox.popleft()
                if key not in self._pending:
                    continue  # abandoned, or a tick armed before the deadline moved
                self._pending.discard(key)
                self._tasks.pop(key, None)
                commands = loop.send(msgspec.structs.replace(obs, now=self._now()))
                self._abandon_stale()
                if self._due():
                    self._continue_as_new(start)
        except asyncio.CancelledError:
            loop.send(Cancelled("the workflow was cancelled", now=self._now()))
        for task in self._tasks.values():
            task.cancel()
        return loop.dump()

    @workflow.query
    def state(self) -> bytes:
        """The loop's dump as it is now (empty before the run begins)."""
        return b"" if self._loop is None else self._loop.dump()

    @workflow.update
    def answer(self, call_id: str, approved: bool, reason: str) -> None:
        """A human's decision on the call `call_id`: approved, or denied for `reason`."""
        self._asked.discard(call_id)
        obs = Approved(call_id, now=0.0) if approved else Denied(call_id, reason, now=0.0)
        self._inbox.append((("approval", call_id), obs))

    @answer.validator
    def _awaited(self, call_id: str, approved: bool, reason: str) -> None:
        if call_id not in self._asked:
            raise ValueError(f"the run awaits no approval of a call {call_id!r}")

    # -- carrying out commands ---------------------------------------------------------------

    def _now(self) -> float:
        """The run's clock: workflow time plus the offset, never before the loop's last event
        (`workflow.time()` is epoch seconds, whose float steps are 2.4e-7 s: a resumed loop's
        offset added back can come out that much before the time it was taken from)."""
        now = workflow.time() + self._offset
        events = self._loop.state.events if self._loop is not None else None
        return max(now, events[-1].now) if events else now

    def _launch(self, commands: list[Command]) -> Finish | None:
        """Start each command; a tool's start goes to the loop before its activity is
        scheduled. Returns the `Finish`, if the loop is done."""
        for command in commands:
            work: Awaitable[Observation]
            match command:
                case Finish():
                    return command
                case CallModel(id=command_id):
                    key, work = ("model", command_id), self._call_model(command)
                case RunTool(id=call_id):
                    self._send(ToolStarted(call_id, now=self._now()))
                    key, work = ("tool", call_id), self._run_tool(command)
                case AwaitApproval(id=call_id):
                    self._asked.add(call_id)
                    self._pending.add(("approval", call_id))
                    continue
                case _:
                    raise TypeError(f"unknown command {command!r}")
            self._pending.add(key)
            self._tasks[key] = asyncio.create_task(self._deliver(key, work))
        return None

    def _send(self, obs: Observation) -> None:
        assert self._loop is not None
        if self._loop.send(obs):
            raise AssertionError(f"{obs!r} decided something")

    async def _deliver(self, key: Key, work: Awaitable[Observation]) -> None:
        self._inbox.append((key, await work))

    async def _call_model(self, command: CallModel) -> Observation:
        if command.not_before is not None and command.not_before > self._now():
            await workflow.sleep(command.not_before - self._now())
        o = self._options
        try:
            data = await workflow.execute_activity(
                MODEL_ACTIVITY,
                args=[self._model, encode(command)],
                result_type=bytes,
                activity_id=f"model:{command.id}",
                start_to_close_timeout=timedelta(seconds=o.model_timeout_s),
                heartbeat_timeout=timedelta(seconds=o.heartbeat_s),
                retry_policy=_retries(o, o.attempts),
            )
        except ActivityError as e:
            message = f"the model call never returned: {e.cause or e}"
            return ModelFailed(command.id, message, True, now=0.0)
        return decode_outcome(data)

    async def _worker_tools(self) -> tuple[ToolSpec, ...]:
        o = self._options
        data = await workflow.execute_activity(
            SPECS_ACTIVITY,
            result_type=bytes,
            activity_id="tool-specs",
            start_to_close_timeout=timedelta(seconds=o.model_timeout_s),
            retry_policy=_retries(o, o.attempts),
        )
        return decode_specs(data)

    async def _run_tool(self, command: RunTool) -> Observation:
        o = self._options
        spec = self._tools.get(command.name)
        safe = spec is not None and spec.replay_safe
        limit = spec.timeout_s if spec is not None and spec.timeout_s else None
        try:
            data = await workflow.execute_activity(
                TOOL_ACTIVITY,
                encode(command),
                result_type=bytes,
                activity_id=command.id,
                start_to_close_timeout=timedelta(
                    seconds=o.tool_timeout_s if limit is None else limit + o.heartbeat_s
                ),
                heartbeat_timeout=timedelta(seconds=o.heartbeat_s),
                retry_policy=_retries(o, o.attempts if safe else 1),
            )
        except ActivityError:
            return ToolReturned(command.id, INTERRUPTED, True, now=0.0)
        return decode_outcome(data)

    # -- the deadline, what the loop gave up on, continuing as new ---------------------------

    def _arm(self) -> None:
        """Wake the loop with a `Tick` when its deadline is due; the deadline moves as the run
        goes (time spent waiting only for a human does not count), so it is followed after
        every step, and a tick armed for another time is dropped."""
        assert self._loop is not None
        deadline = self._loop.next_deadline()
        if deadline == self._armed_for and ("tick", str(self._ticks)) in self._pending:
            return
        self._drop(("tick", str(self._ticks)))
        self._armed_for = deadline
        if deadline is not None:
            self._ticks += 1
            key = ("tick", str(self._ticks))
            self._pending.add(key)
            self._tasks[key] = asyncio.create_task(self._deliver(key, self._tick(deadline)))

    async def _tick(self, deadline: float) -> Observation:
        # at least a millisecond: time stands still within a workflow task, so a tick that a
        # rounding left short of the deadline must not be re-armed for the same instant
        await workflow.sleep(max(deadline - self._now(), 0.001))
        return Tick(now=0.0)

    def _drop(self, key: Key) -> None:
        self._pending.discard(key)
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def _abandon_stale(self) -> None:
        """Cancel the work whose result the loop no longer waits for (it finished, or a guard
        gave up on a running round)."""
        assert self._loop is not None
        wanted = self._loop.outstanding_ids()
        for key in [k for k in self._pending if k[0] != "tick" and k[1] not in wanted]:
            self._asked.discard(key[1])
            self._drop(key)

    def _due(self) -> bool:
        """Whether to continue as new now: the history is long, and no activity is running
        and no answer waits in the inbox (so the dump holds everything)."""
        info = workflow.info()
        long = info.get_current_history_length() >= self._options.continue_after
        if not (long or info.is_continue_as_new_suggested()):
            return False
        busy = any(kind in ("model", "tool") for kind, _ in self._pending)
        return not busy and not any(key in self._pending for key, _ in self._inbox)

    def _continue_as_new(self, start: Input) -> None:
        assert self._loop is not None
        for task in self._tasks.values():
            task.cancel()
        carried = msgspec.structs.replace(start, prompt=None, resumed=False, offset=self._offset)
        workflow.continue_as_new(args=[encode(carried), self._loop.dump()])


def _retries(options: Options, attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=options.retry_interval_s),
        maximum_attempts=attempts,
    )
