"""`Recorded`: a fork's parent log after the fork point, answering the fork's work while the fork
stays on the parent's track. Sans-IO: the `Session` hands it what each step decided, and it
sends the observations it serves back through the session, so they are journaled and shown as
any other.

The parent's log is cut into segments, each opened by a model answer (or a run's start): a
segment holds what answered the calls of that answer's round. The fork is on track while every
model answer, tool result and approval answer it records equals the parent's at the same place
(its time aside). On track, a model call whose request equals the one the parent's spec makes
there gets the parent's answer; a tool call of the round gets the parent's result (as the
policy allows); an approval, the parent's answer. A changed result or answer is served in
place of the parent's once, whenever its call comes. The round in flight when the fork
diverges keeps its recorded results (its calls were decided together); from the next model
call on, everything runs live.
"""

from __future__ import annotations

__all__ = ["Fork", "Recorded", "carried_on", "forked", "forked_loop"]

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol

import msgspec
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Cancelled,
    Command,
    Denied,
    Event,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    RunTool,
    Started,
    ToolOutcome,
    ToolReturned,
    ToolStarted,
)
from turnstile.core.messages import Message

from ._effects import Edit, answer
from ._lineage import Ask, Change, ParentChanged, Policy, Source, parent_of

if TYPE_CHECKING:
    from ._journal import Journal


class Session(Protocol):
    """What a fork's log needs of the `Session` serving it."""

    loop: Loop
    recorded: list[Event]
    now: Callable[[], float]

    def send(self, obs: Observation) -> list[Command]: ...


_Answer = list[tuple[float, Observation]]  # what to send, each with its place in the segment


class _Segment:
    """The parent's events from one model answer (or a run's start) to the next, by call id,
    each with its place among them."""

    __slots__ = ("answers", "opener", "results", "started")

    def __init__(self, opener: Event | None) -> None:
        self.opener = opener
        self.started: dict[str, tuple[int, ToolStarted]] = {}
        self.results: dict[str, tuple[int, ToolReturned]] = {}
        self.answers: dict[str, tuple[int, Approved | Denied]] = {}


def _segments(tail: Sequence[Event]) -> list[_Segment]:
    segments = [_Segment(None)]
    for at, event in enumerate(tail):
        match event:
            case Started() | ModelReplied() | ModelFailed():
                segments.append(_Segment(event))
            case ToolStarted(call_id=call_id):
                segments[-1].started.setdefault(call_id, (at, event))
            case ToolReturned(call_id=call_id):
                segments[-1].results.setdefault(call_id, (at, event))
            case Approved(call_id=call_id) | Denied(call_id=call_id):
                segments[-1].answers.setdefault(call_id, (at, event))
    return segments


def _events(segment: _Segment) -> list[Event]:
    """A segment's events, in their order (its opener first)."""
    placed: list[tuple[int, Event]] = [*segment.started.values(), *segment.results.values()]
    placed += segment.answers.values()
    events = [e for _, e in sorted(placed, key=itemgetter(0))]
    return events if segment.opener is None else [segment.opener, *events]


def _same(recorded: Event | None, event: Event) -> bool:
    """Whether `event` is the parent's `recorded`, its time aside; a reply, whoever wrote it
    and whatever it cost, if it says the same."""
    if recorded is None or type(recorded) is not type(event):
        return False
    if type(event) is ModelReplied:
        assert type(recorded) is ModelReplied
        return event.command_id == recorded.command_id and (
            event.response.content == recorded.response.content
        )
    return recorded == msgspec.structs.replace(event, now=recorded.now)


class _Carried(msgspec.Struct, frozen=True, kw_only=True):
    """A fork's `Recorded` as bytes carry it to another process (a Temporal workflow)."""

    tail: list[Event]
    change: Change
    segment: int
    diverged: bool
    fresh: bool
    served: list[str]
    results: dict[str, ToolOutcome]
    approvals: dict[str, bool | str | Edit]


_decode_carried = msgspec.json.Decoder(_Carried).decode


class Recorded:
    """A fork's parent log after the fork point, and where the fork stands on its track."""

    __slots__ = (
        *("_approvals", "_asked", "_busy", "_results", "_shadow", "ask", "change", "diverged"),
        *("fresh", "parent_spec", "segment", "segments", "served"),
    )

    def __init__(
        self,
        tail: Sequence[Event],
        change: Change,
        parent_spec: LoopSpec,
        ask: Ask | None = None,
        fresh: bool = True,
    ) -> None:
        self.segments = _segments(tail)
        self.segment = 0
        self.diverged = False
        self.change = change
        self.parent_spec = parent_spec
        self.ask = ask
        self.fresh = fresh
        """Whether no session has started the fork yet."""
        self.served: list[str] = []
        """The calls (by id) answered from the parent's log, in order."""
        self._results = dict(change.results)
        self._approvals = dict(change.approvals)
        self._busy = False
        self._shadow: Loop | None = None
        self._asked: dict[tuple[int, str], bool] = {}

    @classmethod
    def of_journal(cls, journal: Journal, spec: LoopSpec) -> Recorded:
        """The parent a fork's journal names, read and checked: `ParentChanged` if it is gone
        or its records before the fork point changed since."""
        assert journal.header is not None
        header = parent_of(journal.header)
        tail: list[Event] = []
        if header.path is not None:
            path = journal.path.parent / header.path
            if not path.exists():
                raise ParentChanged(path, header.index, "is gone")
            source = Source.of_journal(path)
            source.check(len(source))
            if len(source) < header.index or source.digest(header.index) != header.digest:
                raise ParentChanged(
                    path, header.index, "changed since: its records before that point differ"
                )
            tail = [source.event(i) for i in range(header.index, len(source))]
        own = journal.events[header.index :]
        recorded = cls(tail, header.change, spec, fresh=len(own) == header.own)
        recorded.track(own)
        return recorded

    def carried(self) -> bytes:
        """All of it as bytes, for `carried_on` elsewhere (a function `policy` cannot go)."""
        if self.ask is not None:
            raise ValueError("a fork asking a function (policy=) cannot go to another process")
        tail = [e for s in self.segments for e in _events(s)]
        return msgspec.json.encode(
            _Carried(
                tail=tail,
                change=self.change,
                segment=self.segment,
                diverged=self.diverged,
                fresh=self.fresh,
                served=self.served,
                results=self._results,
                approvals=self._approvals,
            )
        )

    @property
    def changes(self) -> bool:
        """Whether a changed result or answer is still to be served."""
        return bool(self._results or self._approvals)

    def track(self, events: Sequence[Event]) -> None:
        """The fork recorded `events`: does it stay on the parent's track?"""
        segments = self.segments
        for event in events:
            if self.diverged:
                return
            match event:
                case Started() | ModelReplied() | ModelFailed():
                    at = self.segment + 1
                    if at < len(segments) and _same(segments[at].opener, event):
                        self.segment = at
                    else:
                        self.diverged = True
                case ToolReturned(call_id=call_id):
                    got = segments[self.segment].results.get(call_id)
                    self.diverged = got is None or not _same(got[1], event)
                case Approved(call_id=call_id) | Denied(call_id=call_id):
                    said = segments[self.segment].answers.get(call_id)
                    self.diverged = said is None or not _same(said[1], event)

    # -- the session's hooks -----------------------------------------------------------------

    def starting(self, session: Session, resume: bool) -> tuple[bool, str | list[Message] | None]:
        """A session starts the fork: the first time, a changed prompt is the prompt it starts
        (a mid-run loop is cancelled first) and the calls started at the fork point are served
        (told `Resumed` only if one must run again). Returns whether to tell the loop it
        resumed, and the prompt."""
        if not self.fresh:
            return resume, None
        self.fresh, self._busy = False, True
        try:
            st = session.loop.state
            prompt = self.change.prompt
            if prompt is not None:
                if st.phase not in ("idle", "done"):
                    session.send(Cancelled(now=session.now(), reason="forked: another prompt"))
                return resume, prompt
            started = [p.call for p in st.round if p.status == "started"]
            if all(self._will_serve(c.id, c.name, session) for c in started) or not resume:
                return False, None  # answered with the rest of the round
            for call in started:  # answered now: `Resumed` runs the rest again
                if self._will_serve(call.id, call.name, session):
                    wanted = frozenset([call.id])
                    for _, obs in (
                        self._answer(RunTool(call.id, call.name, {}), session, wanted) or ()
                    ):
                        self._send(session, obs)
            return True, None
        finally:
            self._busy = False

    def serve(self, session: Session, commands: list[Command]) -> list[Command]:
        """What the step just recorded is tracked; of `commands`, those the parent's log
        answers are answered (and what the loop decides then, in turn); the rest is returned,
        to be carried out live."""
        self.track(session.recorded)
        if self._busy or not commands or (self.diverged and not self.changes):
            return commands
        self._busy = True
        live: list[Command] = []
        try:
            todo = commands
            while todo:
                batch, todo = todo, []
                if self.diverged and not self.changes:
                    live += batch
                    break
                wanted = session.loop.outstanding_ids()
                sends: _Answer = []
                for command in batch:
                    answers = self._answer(command, session, wanted)
                    if answers is None:
                        live.append(command)
                    else:
                        sends += answers
                sends.sort(key=itemgetter(0))  # as the parent had them
                for _, obs in sends:
                    todo += self._send(session, obs)
        finally:
            self._busy = False
        return live

    # -- answering ---------------------------------------------------------------------------

    def _send(self, session: Session, obs: Observation) -> list[Command]:
        """Send a served `obs`, at its time in the parent unless the fork's time is past it."""
        events = session.loop.state.events
        if events and obs.now < events[-1].now:
            obs = msgspec.structs.replace(obs, now=events[-1].now)
        return session.send(obs)

    def _answer(self, command: Command, session: Session, wanted: frozenset[str]) -> _Answer | None:
        """What answers `command` from the parent's log (and starts it, for a tool call), each
        with its place; None: it runs live."""
        segment = self.segments[self.segment]
        match command:
            case RunTool(id=call_id) if call_id in wanted:
                return self._tool(command, segment, session)
            case CallModel(id=command_id) if not self.diverged:
                at = self.segment + 1
                if at < len(self.segments):
                    opener = self.segments[at].opener
                    if isinstance(opener, ModelReplied | ModelFailed):
                        if opener.command_id == command_id and self._asks_same(session, command):
                            return [(-1, opener)]
            case AwaitApproval(id=call_id) if call_id in wanted:
                said = segment.answers.get(call_id)
                if call_id in self._approvals:
                    now = said[1].now if said is not None else 0.0
                    obs = answer(command, self._approvals.pop(call_id), now)
                    return [(said[0] if said is not None else float("inf"), obs)]
                if said is not None and not self.diverged:
                    return [said]
        return None

    def _tool(self, command: RunTool, segment: _Segment, session: Session) -> _Answer | None:
        call_id = command.id
        got = segment.results.get(call_id)
        if call_id in self._results:
            outcome = self._results.pop(call_id)
            at, now = (float("inf"), 0.0) if got is None else (got[0], got[1].now)
            given = ToolReturned(call_id, outcome.content, outcome.is_error, now=now)
            return [*self._started(command, segment, session, at), (at, given)]
        if got is None or self.diverged or not self._serves(command, got[1], session):
            return None
        self.served.append(call_id)
        return [*self._started(command, segment, session, got[0]), got]

    def _started(self, command: RunTool, segment: _Segment, session: Session, at: float) -> _Answer:
        """The call's start, as the parent recorded it, unless the fork has it already."""
        for p in session.loop.state.round:
            if p.call.id == command.id and p.status == "started":
                return []
        recorded = segment.started.get(command.id)
        return (
            [recorded] if recorded is not None else [(at - 0.5, ToolStarted(command.id, now=0.0))]
        )

    def _will_serve(self, call_id: str, name: str, session: Session) -> bool:
        """Whether the call started at the fork point will be answered from the log."""
        if call_id in self._results:
            return True
        got = self.segments[self.segment].results.get(call_id)
        return got is not None and self._serves(RunTool(call_id, name, {}), got[1], session)

    def _serves(self, command: RunTool, returned: ToolReturned, session: Session) -> bool:
        if self.ask is not None:  # asked once a call
            key = (self.segment, command.id)
            if key not in self._asked:
                self._asked[key] = bool(self.ask(command, returned))
            return self._asked[key]
        if self.change.policy == "replay_safe":
            tools = session.loop.spec.tools
            return not any(t.name == command.name and t.replay_safe for t in tools)
        return True

    def _asks_same(self, session: Session, command: CallModel) -> bool:
        """Whether `command` asks what the parent's spec would ask in the same state."""
        spec = session.loop.spec
        if spec == self.parent_spec:
            return True
        state = session.loop.state
        if self._shadow is None or self._shadow.state is not state:
            self._shadow = Loop(self.parent_spec, state)
        for parents in self._shadow.outstanding_commands():
            if type(parents) is CallModel:
                return parents.request == command.request
        return False


class Fork(Loop):
    """A loop cut from another run's events by `fork`: an executor given it (`loop=`) serves
    the parent's log while the fork stays on its track."""

    __slots__ = ("recorded",)

    recorded: Recorded

    @property
    def served(self) -> list[str]:
        """The calls (by id) answered from the parent's log so far, in order: show them with
        `transcript(state, served=...)`."""
        return self.recorded.served

    @property
    def diverged(self) -> bool:
        """Whether the fork has left the parent's track (from there on, everything runs live)."""
        return self.recorded.diverged


def forked_loop(
    spec: LoopSpec, events: Sequence[Event], index: int, change: Change, policy: Policy
) -> Fork:
    """The fold of `events` before `index` under the parent's `spec`, as a `Fork` serving the
    rest; where the rest begins a run, the fork begins it (with the changed prompt, if any)."""
    loop = Fork(spec, Loop.replay(spec, events[:index]).state)
    tail = events[index:]
    loop.recorded = recorded = Recorded(
        tail, change, spec, None if isinstance(policy, str) else policy
    )
    if tail and type(first := tail[0]) is Started:
        messages: str | Sequence[Message] = first.messages
        if change.prompt is not None:
            messages = change.prompt
            recorded.change = msgspec.structs.replace(change, prompt=None)
        loop.start(messages, first.now, first.tools)
        recorded.track(loop.state.events[-1:])
    return loop


def forked(
    spec: LoopSpec, loop: Loop | None, journal: Journal | None
) -> tuple[Recorded | None, LoopSpec]:
    """A session's fork, if it runs one (a `Fork`, or a fork's journal), and its spec as the
    fork changes it."""
    if isinstance(loop, Fork):
        recorded = loop.recorded
    elif journal is not None and getattr(journal, "header", None) is not None:
        recorded = Recorded.of_journal(journal, spec)  # (a journal of one's own has no header)
    else:
        return None, spec
    return recorded, recorded.change.spec(spec)


def carried_on(loop: Loop, data: bytes) -> Fork:
    """`loop` as the fork whose `Recorded.carried()` bytes are `data` (its spec taken for the
    parent's)."""
    got = _decode_carried(data)
    recorded = Recorded(got.tail, got.change, loop.spec, fresh=got.fresh)
    recorded.segment, recorded.diverged, recorded.served = got.segment, got.diverged, got.served
    recorded._results, recorded._approvals = dict(got.results), dict(got.approvals)
    out = Fork(loop.spec, loop.state)
    out.recorded = recorded
    return out
