"""One seed's world: a sans-IO driver over the executors' `Session` on a virtual clock, whose
scheduler decides when each piece of work comes back and which faults strike (`Schedule`). No
thread, no sleep: time jumps to the next thing that happens. A crash drops the driver and its
work in flight; a fresh one resumes from the journal, as a new process would."""

from __future__ import annotations

__all__ = ["Crash", "MemoryJournal", "Setup", "World"]

import heapq
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from turnstile.core import (
    AwaitApproval,
    CallModel,
    CheckGuardrail,
    Event,
    GuardrailChecked,
    Loop,
    LoopSpec,
    ModelError,
    ModelReplied,
    ModelRequest,
    Observation,
    RunTool,
    ToolOutcome,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import AssistantMessage, Message, ModelResponse
from turnstile.executors._effects import Decision, Edit, answer, model_failed, returned
from turnstile.executors._session import Session, Work

from ._faults import Draws, FaultKind, Schedule

if TYPE_CHECKING:
    from turnstile.executors._journal import Journal

RESTART_S = 5.0
"""How long a crashed process takes to come back, in virtual seconds."""
MAX_CRASHES = 20
"""A seed's run crashes at most this often: even `Faults(crash=1.0)` ends."""
GARBAGE = "\x00\ufffd{]garbage;\x7f"
"""What a tool returns when `tool_garbage` strikes."""

Check = Callable[["World", Session], "tuple[str, str] | None"]
"""An invariant checked after every step: None, or (its name, what broke)."""


class Crash(Exception):
    """The simulated process died (at a journal write)."""


class MemoryJournal:
    """A `Journal` in memory, whose writes are where crashes strike: a crash at a write loses
    that event and everything after it, as a killed process does."""

    fsync = "batch"

    def __init__(self, schedule: Schedule) -> None:
        self.events: list[Event] = []
        self.crashes = 0
        self._schedule = schedule

    def append(self, event: Event) -> None:
        if self._schedule.draw("write")[0] is FaultKind.crash and self.crashes < MAX_CRASHES:
            self.crashes += 1
            raise Crash
        self.events.append(event)

    def commit(self) -> None:
        pass

    def loop(self, spec: LoopSpec) -> Loop:
        return Loop.replay(spec, self.events)


@dataclass(frozen=True)
class Setup:
    """What a simulation runs: the spec, the prompt, the model side, the tools and their
    calling, the approver, and the checks made after every step and at the end."""

    spec: LoopSpec
    prompt: str | Sequence[Message]
    reply: Callable[[ModelRequest], ModelResponse]
    specs: tuple[Any, ...]
    run_call: Callable[[RunTool], ToolOutcome]
    approve: Callable[[AwaitApproval], Decision] | None
    checks: Sequence[Check]
    finals: Sequence[Check]
    tool_timeout: float | None
    max_time: float
    wire: tuple[Callable[[ModelRequest], ModelResponse], Any] | None = None
    """A trace's client and its `FaultyTransport`: where the wire's faults strike."""


@dataclass
class World:
    """One seed's run, across crashes: the clock, the work in flight, what the tools did."""

    setup: Setup
    schedule: Schedule
    now: float = 0.0
    step: int = 0
    crashes: int = 0
    invocations: Counter[str] = field(default_factory=Counter)
    """How many times each tool call's function ran (by call id), across crashes."""
    replies: dict[int, ModelResponse] = field(default_factory=dict)
    """The model's replies, by turn (assistant messages in the request)."""
    broken: tuple[str, str] | None = None
    """The invariant that broke, and how; None while all hold."""
    session: Session | None = None
    _pending: list[tuple[float, int, str, Callable[[float], Observation]]] = field(
        default_factory=list
    )
    _seq: int = 0

    def clock(self) -> float:
        return self.now

    def run(self) -> Session:
        """Drive the run until it finishes or an invariant breaks; the last session."""
        journal = MemoryJournal(self.schedule)
        while True:
            try:
                self._drive(journal)
            except Crash:
                self.crashes += 1
                self.now += RESTART_S
                self._pending.clear()
                continue
            assert self.session is not None
            return self.session

    def events(self) -> list[Event]:
        assert self.session is not None
        return list(self.session.loop.state.events)

    def _drive(self, journal: MemoryJournal) -> None:
        setup = self.setup
        self.session = session = Session(
            setup.spec,
            setup.prompt,
            tool_specs=setup.specs,
            clock=self.clock,
            journal=cast("Journal", journal),
            log=False,
        )
        self._hand_out(session, session.start())
        pending = self._pending
        while session.finish is None and self.broken is None:
            if self._checked(session, setup.checks):
                return
            wait = session.alarm(1e-6)
            due = pending[0][0] if pending else math.inf
            if wait is not None and self.now + wait <= due:
                self.now += wait
                if (tick := session.tick()) is not None:
                    self._observe(session, tick)
                continue
            if due > setup.max_time:
                self.broken = ("no_hang", _stuck(self, session, due))
                return
            at, _, _, make = heapq.heappop(pending)
            self.now = at
            self._observe(session, make(at))
        if self.broken is None and not self._checked(session, setup.checks):
            self._checked(session, setup.finals)

    def _checked(self, session: Session, checks: Sequence[Check]) -> bool:
        for check in checks:
            if (broken := check(self, session)) is not None:
                self.broken = broken
                return True
        return False

    def _observe(self, session: Session, obs: Observation) -> None:
        self.step += 1
        commands = session.send(obs)
        self._hand_out(session, commands)
        stale = set(session.stale({key for _, _, key, _ in self._pending}))
        if stale:
            self._pending[:] = [p for p in self._pending if p[2] not in stale]  # in place:
            heapq.heapify(self._pending)  # the driving loop holds the list

    def _hand_out(self, session: Session, commands: list[Any]) -> None:
        work = session.hand_out(commands, approving=True)
        tools = [w for w in work if type(w) is RunTool]
        times = [self._start(session, w) for w in work]
        if len(tools) > 1:
            kind, r = self.schedule.draw("round")
            if kind is FaultKind.reorder:
                order = [i for i, w in enumerate(work) if type(w) is RunTool]
                ats = [times[i][0] for i in order]
                r.shuffle(ats)
                for i, at in zip(order, ats, strict=True):
                    times[i] = (at, times[i][1])
        for w, (at, make) in zip(work, times, strict=True):
            self._seq += 1
            heapq.heappush(self._pending, (at, self._seq, w.id, make))

    def _start(self, session: Session, work: Work) -> tuple[float, Callable[[float], Observation]]:
        """Begin `work` now: when it comes back, and what it says then."""
        match work:
            case CallModel():
                return self._call(session, work)
            case RunTool():
                return self._tool(work)
            case CheckGuardrail(id=check_id):  # a world's guardrails pass, at once
                return self.now, lambda now: GuardrailChecked(check_id, False, now=now)
        return self._approval(work)

    def _call(
        self, session: Session, command: CallModel
    ) -> tuple[float, Callable[[float], Observation]]:
        kind, r = self.schedule.draw("model")
        at = self.now + session.wait(command) + r.uniform(0.2, 2.0)
        cid = command.id
        if kind is FaultKind.model_retryable:
            after = float(r.randint(1, 30))
            err = ModelError(
                "rate limited (simulated)", retryable=True, retry_after=after, status=429
            )
            return at, lambda now: model_failed(cid, err, now)
        if kind is FaultKind.model_final:
            err = ModelError("bad request (simulated)", retryable=False, status=400)
            return at, lambda now: model_failed(cid, err, now)
        if kind is FaultKind.model_malformed:
            bad = cast(ModelResponse, "not a reply (simulated)")
            return at, lambda now: ModelReplied(cid, bad, now=now)
        session.calling(command)
        turn = sum(type(m) is AssistantMessage for m in command.request.messages)
        reply = self.setup.reply
        if self.setup.wire is not None:
            complete, transport = self.setup.wire
            wire, w = self.schedule.draw("wire")
            if wire is not None:  # the SDK client meets it, and fails as it would live
                transport.armed, reply = (wire, w), complete
        try:
            response = reply(command.request)
        except Exception as e:  # as an executor does: the call failed, the run goes on
            failed = e
            return at, lambda now: model_failed(cid, failed, now)
        self.replies.setdefault(turn, response)
        return at, lambda now: ModelReplied(cid, response, now=now)

    def _tool(self, command: RunTool) -> tuple[float, Callable[[float], Observation]]:
        kind, r = self.schedule.draw("tool")
        setup = self.setup
        duration = r.uniform(0.05, 1.0)
        if kind is FaultKind.tool_slow:
            duration *= r.uniform(20, 60)
        elif kind is FaultKind.tool_hang:
            duration = math.inf
        if kind is FaultKind.tool_raise:
            outcome = ToolOutcome(f"{command.name} failed: OSError: injected fault", True)
        else:
            self.invocations[command.id] += 1
            outcome = setup.run_call(command)
            if kind is FaultKind.tool_garbage:
                outcome = ToolOutcome(GARBAGE)
        assert self.session is not None
        limit = _limit(self.session.loop.spec.tools, setup.tool_timeout, command.name)
        if duration > limit:  # as the async executor: the call ends in an error result
            text = f"{command.name} timed out after {limit:g} s"
            return self.now + limit, lambda now: ToolReturned(command.id, text, True, now=now)
        return self.now + duration, lambda now: returned(command, outcome, now)

    def _approval(self, command: AwaitApproval) -> tuple[float, Callable[[float], Observation]]:
        kind, r = self.schedule.draw("approval")
        delay = r.uniform(600, 3600) if kind is FaultKind.approval_late else r.uniform(1, 30)
        approve = self.setup.approve
        decision: Decision = True if approve is None else approve(command)
        if kind is FaultKind.approval_denied:
            decision = "denied (simulated)"
        elif kind is FaultKind.approval_edited:
            assert self.session is not None
            decision = _edited(command, self.session.loop.spec.tools, r)
        return self.now + delay, lambda now: answer(command, decision, now)


def _edited(command: AwaitApproval, specs: Sequence[ToolSpec], r: Draws) -> Decision:
    """A person's edit of the call's arguments that fits its tool's schema: one field changed
    (a flag flipped, a number moved, a string shortened or another member of its enum), the
    first of them in the draw's order that fits; a plain yes if none does."""
    spec = next((s for s in specs if s.name == command.name), None)
    if spec is None:
        return True
    properties = spec.parameters.get("properties", {})
    edits: list[dict[str, Any]] = []
    for key, value in command.arguments.items():
        options: list[Any] = [not value] if isinstance(value, bool) else []
        if isinstance(value, int | float) and not isinstance(value, bool):
            options += [value + 1, value - 1, value * 2]
        elif isinstance(value, str):
            options += [value[: len(value) // 2], f"{value}-edited"]
        member = properties.get(key) if isinstance(properties, dict) else None
        enum = member.get("enum", ()) if isinstance(member, dict) else ()
        options += [m for m in enum if m != value]
        edits += [{**command.arguments, key: option} for option in options]
    r.shuffle(edits)
    for arguments in edits:
        if spec.arguments_problem(arguments) is None:
            return Edit(arguments)
    return True


def _limit(specs: Sequence[ToolSpec], default: float | None, name: str) -> float:
    """How long a call of `name` may run, as the async executor allows it."""
    for spec in specs:
        if spec.name == name and spec.timeout_s is not None:
            return float(spec.timeout_s)
    return math.inf if default is None else default


def _stuck(world: World, session: Session, due: float) -> str:
    waits = ", ".join(sorted(session.loop.outstanding_ids())) or "nothing"
    if due == math.inf:
        return (
            f"at {world.now:g} s the run waits on {waits}, which never comes back, and no "
            "deadline or tool timeout ends the wait"
        )
    return f"the run waits on {waits} past the virtual-time bound ({world.setup.max_time:g} s)"
