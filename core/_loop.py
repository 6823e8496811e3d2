"""`Loop`: feed it observations, get commands back. Pure: no clock, no I/O, no randomness.

Each step refuses what answers nothing outstanding before it changes anything, records the
observation, asks the guards, and moves to the phase the table in `_machine` gives for what it
decided. Per observation the work is independent of history length: the ledger only grows,
requests carry an O(1) `History` view of it, and every guard keeps its own small counter.
"""

from __future__ import annotations

__all__ = ["Loop"]

from collections.abc import Sequence

from ._boundary import checked, started
from ._commands import Command
from ._errors import ProtocolError
from ._guards import estimate_tokens as estimate_tokens  # core/__init__ reads it here
from ._machine import DONE, FINALIZING, TABLE
from ._messages import Message
from ._observations import Event, Observation, Started
from ._record import record
from ._spec import LoopSpec
from ._state import CallStatus, LoopState, dump_state, load_state
from ._step import Step
from ._tools import ToolSpec

# the calls a loop waits on: running, or awaiting approval
_WAITED = frozenset({CallStatus.running, CallStatus.started, CallStatus.approval})


class Loop:
    """The agent loop as a state machine over `LoopState`.

    `start()` hands it the conversation, `send()` each observation; both return the commands to
    carry out next (an empty list while results are still outstanding). An observation that
    matches nothing outstanding raises `ProtocolError` and leaves the state untouched.
    """

    __slots__ = ("_step", "spec", "state")

    def __init__(self, spec: LoopSpec, state: LoopState | None = None) -> None:
        self.spec = spec
        self.state = state if state is not None else LoopState()
        self._step = Step(spec, self.state)

    # -- persistence -------------------------------------------------------------------------

    def dump(self) -> bytes:
        """The whole state as bytes; `Loop.load(spec, data)` continues from it anywhere."""
        return dump_state(self.state)

    @classmethod
    def load(cls, spec: LoopSpec, data: bytes | str) -> Loop:
        """Rebuild a loop from `dump()`; raises `CorruptState` when the bytes cannot be used."""
        return cls(spec, load_state(data))

    @classmethod
    def replay(cls, spec: LoopSpec, events: Sequence[Event]) -> Loop:
        """Rebuild a loop by feeding a recorded event log to a fresh one."""
        loop = cls(spec)
        for event in events:
            if type(event) is Started:
                loop.start(event.messages, event.now, event.tools)
            else:
                loop.send(event)  # type: ignore[arg-type]
        return loop

    # -- what executors ask ------------------------------------------------------------------

    def outstanding_commands(self) -> list[Command]:
        """The commands the state still waits on, as they were sent: what a resumed executor
        (after `load` or `replay`) must carry out again."""
        return self._step.outstanding()

    def outstanding_ids(self) -> frozenset[str]:
        """The ids of the commands the loop still waits on (its model call, each running call,
        each call awaiting approval, each guardrail check): an executor may drop work whose id
        is not among them."""
        st = self.state
        ids = [p.call.id for p in st.round if p.status in _WAITED]
        if st.checks:
            ids += [c.id for c in st.checks]
        if st.pending_model is not None:
            ids.append(st.pending_model)
        return frozenset(ids)

    def next_deadline(self) -> float | None:
        """When (on the clock that stamps observations) the deadline guard will fire, so an
        executor can send a `Tick` then; None when no deadline can fire any more."""
        st = self.state
        if st.phase is FINALIZING or st.phase is DONE:
            return None
        return self._step.checks.deadline(st)

    def deadline_passed(self, now: float) -> bool:
        """Whether a `Tick` stamped `now` stops the run for its deadline: a driver woken at
        `next_deadline()` sends one only then, so clocks that disagree by a rounding never make
        it tick in a loop."""
        st = self.state
        if st.phase is FINALIZING or st.phase is DONE:
            return False
        return self._step.checks.deadline_passed(st, now)

    def resume_offset(self, now: float) -> float:
        """What to add to a clock reading `now` so a resumed run's time goes on from its last
        event: time a dumped state spent at rest (a human away, a restart) is not counted."""
        events = self.state.events
        return events[-1].now - now if events else 0.0

    # -- driving -----------------------------------------------------------------------------

    def start(
        self, prompt: str | Sequence[Message], now: float, tools: Sequence[ToolSpec] = ()
    ) -> list[Command]:
        """Begin with a prompt (or a whole conversation ending on the user's side). On a finished
        loop, go on with the conversation: a new run over the same history, its guards counted
        afresh.

        `tools`, if any, are the run's in place of the spec's (those a tool runner or an MCP
        server offers). Its `Started` event records the run's tools, given or the spec's, so
        `replay` and `load` decide the same without whoever supplied them, and a log describes
        itself."""
        st = self.state
        moves = TABLE[st.phase].get(Started)
        if moves is None:
            raise ProtocolError(f"start() in phase {st.phase}: the run is under way")
        event = started(prompt, now, self._last_time(), st.messages, tools or self.spec.tools)
        return self._step.begin(moves, event)

    def send(self, obs: Observation) -> list[Command]:
        """Hand the loop one observation; returns the commands it decides on."""
        st = self.state
        moves = TABLE[st.phase].get(type(obs))  # refuse what the phase does not take
        if moves is None:
            raise ProtocolError(f"cannot accept {obs!r} in phase {st.phase}")
        events = st.events  # (the last event's time, read inline: this runs twice a turn)
        obs = checked(obs, events[-1].now if events else None)  # check it at the boundary
        step = self._step
        reused = record(st, obs, self.spec, step.tools)  # write it down, or refuse it
        return step.after(moves, obs, reused)  # decide, and apply the decision

    def _last_time(self) -> float | None:
        events = self.state.events
        return events[-1].now if events else None
