"""The loop's whole state as plain data, and its dump format.

A dump is JSON: `{"schema": N, "state": {...}}`. New fields always get defaults, so a dump from
an older schema loads; a newer schema or damaged bytes raise `CorruptState` saying why. Schema 2
moved the reason a finalizing run stops for from `state.finalizing` to `state.stop_reason`: an
older turnstile must refuse such a dump, not read it as finalizing for nothing.
"""

from __future__ import annotations

__all__ = [
    "SCHEMA_VERSION",
    "CallStatus",
    "Compacted",
    "LoopState",
    "PendingCall",
    "PendingCheck",
    "dump_state",
    "load_state",
    "new_run",
    "state_problems",
]

import enum
from typing import Any, Literal
from zlib import crc32

import msgspec

from ._commands import StopReason
from ._decoding import decoded
from ._errors import CorruptState, InvalidHistory
from ._guardrails import GuardrailKind
from ._history import History, history_problems
from ._machine import Phase
from ._messages import AssistantMessage, Message, ToolCall, ToolResult, ToolResults, Usage
from ._observations import Cancelled, Event, Started

SCHEMA_VERSION = 2


class CallStatus(enum.StrEnum):
    queued = "queued"  # may run once the calls it must not overlap have returned
    approval = "approval"  # waits for a human's Approved / Denied
    running = "running"  # a RunTool went out
    started = "started"  # the executor said it was about to run it (ToolStarted)
    done = "done"  # has its result


Strategy = Literal["clear_tool_results", "drop_turns", "summarize"]
"""How `Compaction` makes room: clear old tool results, drop old turns, or summarize them."""


class Compacted(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One compaction, as the state keeps it: from the request after the ledger's first `at`
    messages on, the messages from `head` (the first reply: what comes before it, the prompt,
    is always sent) up to `upto` are cleared, or left out (with a note, or a `summary` written
    by the call `command_id`). `tokens_before` and `tokens_after`: the request's estimated
    size."""

    strategy: Strategy
    at: int
    head: int
    upto: int
    tokens_before: int
    tokens_after: int
    summary: str | None = None
    command_id: str | None = None


class PendingCall(msgspec.Struct, gc=False, omit_defaults=True):
    """One call of the round in flight (untracked by the GC: it holds no cycle). A call a
    person approved with other arguments (`Approved.arguments`) runs as `call`, with them, and
    keeps the call as the model made it, which the conversation holds, as `original`."""

    call: ToolCall
    status: CallStatus
    result: ToolResult | None = None
    original: ToolCall | None = None


class PendingCheck(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A guardrail check asked for (`CheckGuardrail`) and not answered yet; `call_id`: the call
    of the round it checks (`on="tool_call"`)."""

    id: str
    name: str
    on: GuardrailKind
    call_id: str | None = None


class LoopState(msgspec.Struct, kw_only=True):
    """Everything the loop knows. Written only where an observation is recorded (`_record`)
    and where a decision is applied (`Step.apply`); dump it after any step.

    A round is one reply's tool calls and their results; `round` holds the one in flight.
    `stop_reason` is set once the loop knows why the run ends, which in phase `finalizing` is
    before the run is done. `usage` and `cost` total the conversation's calls; `model_index`
    is which of `LoopSpec.models` is asked; `compactions` says what requests leave out (the last
    one decides), and `summarizing`, in phase `compacting`, where the summary asked for ends.
    `checks`: the guardrail checks asked for and not answered; `held`, in phase `checking`
    without a round, the reason the run finishes for once they pass (its answer in `output`).
    Both are left out of a dump while unset, so a run without guardrails dumps as before.
    """

    phase: Phase = Phase.idle
    messages: list[Message] = msgspec.field(default_factory=list)
    turns: int = 0
    usage: Usage = Usage()
    cost: float = 0.0
    cost_before: float = 0.0  # the conversation's cost when this run began: the budget's start
    model_index: int = 0
    compactions: list[Compacted] = msgspec.field(default_factory=list)
    summarizing: int | None = None
    started_at: float | None = None
    waited_s: float = 0.0  # time spent waiting only for a human: not the run's own
    waiting_since: float | None = None  # set while it waits only for a human
    model_calls: int = 0
    pending_model: str | None = None
    retry_at: float | None = None  # the pending model call is a retry, not to be sent before
    retries: int = 0
    round: list[PendingCall] = msgspec.field(default_factory=list, name="batch")
    context_tokens: int = 0
    call_counts: dict[str, int] = msgspec.field(default_factory=dict)
    round_digests: list[str] = msgspec.field(default_factory=list)
    failed_rounds: int = 0
    output_retries: int = 0  # answers that failed `LoopSpec.output`
    stop_reason: StopReason = StopReason.unknown
    output: Any = None
    events: list[Event] = msgspec.field(default_factory=list)
    checks: list[PendingCheck] | msgspec.UnsetType = msgspec.UNSET
    held: StopReason | msgspec.UnsetType = msgspec.UNSET

    @property
    def outstanding(self) -> list[PendingCall]:
        """Calls of the round in flight that have no result yet."""
        return [p for p in self.round if p.status is not CallStatus.done]


def new_run(st: LoopState) -> None:
    """A finished loop goes on: the conversation stays, the run's own counts start again."""
    st.turns = 0
    st.cost_before = st.cost
    st.model_index = 0
    st.waited_s = 0.0
    st.retries = 0
    st.call_counts = {}
    st.round_digests = []
    st.failed_rounds = 0
    st.output_retries = 0
    st.stop_reason = StopReason.unknown
    st.output = None


class _Dump(msgspec.Struct):
    schema: int
    state: msgspec.Raw
    checksum: str | None = None


class _Phase(msgspec.Struct):
    """A state's phase alone, read to say why a state with an unknown one does not load."""

    phase: str = "idle"


class _Finalizing(msgspec.Struct):
    """Schema 1 kept the reason a run was finalizing for in `state.finalizing`."""

    finalizing: StopReason | None = None


def _enc_hook(obj: object) -> object:
    if isinstance(obj, History):
        return list(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_dump = msgspec.json.Decoder(_Dump)
_state = msgspec.json.Decoder(LoopState)
_schema_1 = msgspec.json.Decoder(_Finalizing)
_phase = msgspec.json.Decoder(_Phase)
_PHASE_NAMES = frozenset(Phase)
_PENDING = (Phase.awaiting_tools, Phase.awaiting_approval, Phase.checking)  # a round in flight
_ASKING = (Phase.awaiting_model, Phase.finalizing, Phase.compacting)  # a model call outstanding


def dump_state(state: LoopState) -> bytes:
    """`{"schema": N, "checksum": crc32 of the state's bytes, "state": {...}}`."""
    body = ENCODER.encode(state)
    return b'{"schema":%d,"checksum":"%08x","state":%s}' % (SCHEMA_VERSION, crc32(body), body)


def load_state(data: bytes | str) -> LoopState:
    """Decode a dump, raising `CorruptState` with the reason when it cannot be used: not a
    dump, damaged (its checksum does not match), newer, or a state no loop could be in."""
    dump = decoded(_dump.decode, data, _not_a_dump)
    if dump.schema > SCHEMA_VERSION:
        raise CorruptState(
            f"dump has schema {dump.schema}, newer than this turnstile's {SCHEMA_VERSION}; upgrade"
        )
    body = bytes(dump.state)
    if dump.schema >= 2 and dump.checksum != f"{crc32(body):08x}":
        raise CorruptState("damaged state dump: its checksum does not match its state")
    try:
        state = decoded(_state.decode, body, _damaged)
    except CorruptState:
        phase = _phase_named(body)
        if phase is None or phase in _PHASE_NAMES:
            raise
        raise CorruptState(f"no loop can be in this state: unknown phase {phase!r}") from None
    if dump.schema < 2 and state.phase is Phase.finalizing:
        finalizing = decoded(_schema_1.decode, body, _damaged).finalizing
        state.stop_reason = finalizing or StopReason.unknown
    problems = state_problems(state)
    if problems:
        raise CorruptState(f"no loop can be in this state: {'; '.join(problems)}")
    return state


def _phase_named(body: bytes) -> str | None:
    """The phase a state that did not decode names, if it names one as a string."""
    try:
        return _phase.decode(body).phase
    except (ValueError, msgspec.MsgspecError, RecursionError, MemoryError):
        return None


def _not_a_dump(reason: str) -> CorruptState:
    return CorruptState(f"not a turnstile state dump: {reason}")


def _damaged(reason: str) -> CorruptState:
    return CorruptState(f"damaged state dump: {reason}")


def state_problems(st: LoopState) -> list[str]:
    """What makes `st` a state no loop could be in (its parts disagree); empty if nothing."""
    phase = st.phase
    problems: list[str] = []
    add = problems.append
    if not any(type(e) is Started for e in st.events):  # never started: idle, or cancelled so
        untouched = not st.messages and st.started_at is None and st.pending_model is None
        cancelled = [type(e) for e in st.events] == [Cancelled]
        if untouched and (
            (phase is Phase.idle and not st.events)
            or (phase is Phase.done and cancelled and st.stop_reason is StopReason.cancelled)
        ):
            return []
        add(f"phase {phase}, yet it never started (no Started event)")
    else:
        if phase is Phase.idle:
            add("idle, yet started")
        if not st.messages:  # a run starts from at least one message
            add("started, yet its conversation is empty")
    if any(b.now < a.now for a, b in zip(st.events, st.events[1:], strict=False)):
        add("its events go back in time")
    if st.started_at is None:
        add(f"started_at is missing in phase {phase}")
    if (phase in _ASKING) != (st.pending_model is not None):
        add(f"no model call outstanding in phase {phase}" if phase in _ASKING else
            f"a model call outstanding in phase {phase}")  # fmt: skip
    elif st.pending_model is not None and st.pending_model != f"model-{st.model_calls}":
        add(f"the model call outstanding, {st.pending_model}, is not the last one asked")
    if (phase is Phase.compacting) != (st.summarizing is not None):
        add(f"a summary asked for is {st.summarizing is not None} in phase {phase}")
    if st.model_index < 0:
        add(f"model {st.model_index} of the spec's models asked")
    if st.retry_at is not None and st.pending_model is None:
        add("a retry time, but no model call outstanding")
    if (phase in (Phase.finalizing, Phase.done)) != (st.stop_reason is not StopReason.unknown):
        add(f"stop reason {st.stop_reason.value} in phase {phase}")
    if (phase is Phase.awaiting_approval) != (st.waiting_since is not None):
        add(f"waiting for a human is {st.waiting_since is not None} in phase {phase}")
    problems += _round_problems(st)
    problems += _check_problems(st)
    problems += _compaction_problems(st)
    history = history_problems(st.messages, allow_pending=phase in _PENDING)
    if history:
        add(f"an invalid history: {InvalidHistory(history)}")
    return problems


def _is_cut(messages: list[Message], k: int) -> bool:
    """A turn begins at `k` after a round's results: where compaction may cut."""
    return (
        0 < k < len(messages)
        and type(messages[k]) is AssistantMessage
        and (type(messages[k - 1]) is ToolResults)
    )


def _compaction_problems(st: LoopState) -> list[str]:
    """Records that no compaction could have made: each cuts where a turn begins, after the
    last one's cut, from the first reply on, so that what requests send stays a valid history."""
    messages = st.messages
    head = next((i for i, m in enumerate(messages) if type(m) is AssistantMessage), len(messages))
    start, at = head, 0
    for i, r in enumerate(st.compactions):
        if r.head != head or not start < r.upto < r.at <= len(messages):
            return [f"compaction {i} cuts at {r.head}..{r.upto} of {r.at}, not where it could"]
        if not _is_cut(messages, r.upto) or r.at < at:
            return [f"compaction {i} cuts at {r.upto} of {r.at}, not where a turn begins"]
        if r.summary is not None and r.strategy != "summarize":
            return [f"compaction {i} has a summary, yet it {r.strategy}"]
        start, at = r.upto, r.at
    cut = st.summarizing
    if cut is not None and (cut <= start or not _is_cut(messages, cut)):
        return [f"a summary asked for up to {cut}, where no compaction could cut"]
    return []


_CHECKED = (Phase.awaiting_model, Phase.compacting, Phase.checking)  # checks may be outstanding


def _check_problems(st: LoopState) -> list[str]:
    """Guardrail checks outstanding where none can be, a phase `checking` that holds nothing
    back, or a held answer outside it."""
    phase, checks = st.phase, st.checks or []
    if checks and phase not in _CHECKED:
        return [f"guardrail checks outstanding in phase {phase}"]
    if len({c.id for c in checks}) < len(checks):
        return ["two guardrail checks outstanding share an id"]
    if phase is Phase.checking:
        if not checks:
            return ["checking guardrails, yet none is outstanding"]
        if (st.held is msgspec.UNSET) == (not st.round):
            return ["checking guardrails, yet holding back no round or both a round and an answer"]
        ids = {p.call.id for p in st.round}
        if any(c.call_id is not None and c.call_id not in ids for c in checks):
            return ["a guardrail check of a call the round does not hold"]
    elif st.held is not msgspec.UNSET:
        return [f"an answer held back for guardrails in phase {phase}"]
    return []


def _round_problems(st: LoopState) -> list[str]:
    statuses = {p.status for p in st.round}
    if st.phase not in _PENDING:
        return [f"a round in flight in phase {st.phase}"] if st.round else []
    problems: list[str] = []
    busy = CallStatus.running in statuses or CallStatus.started in statuses
    if st.phase is Phase.awaiting_tools and not busy:
        problems.append("awaiting tools, yet no call is running")
    if st.phase is Phase.awaiting_approval and (CallStatus.approval not in statuses or busy):
        problems.append("awaiting approval, yet no call waits for one alone")
    if st.phase is Phase.checking and st.round and (busy or statuses <= {CallStatus.done}):
        problems.append("checking guardrails, yet the round holds no call back")
    for p in st.round:
        if (p.status is CallStatus.done) != (p.result is not None):
            problems.append(f"call {p.call.id} is {p.status.value} with a result of {p.result}")
        elif p.result is not None and p.result.call_id != p.call.id:
            problems.append(f"call {p.call.id} holds the result of {p.result.call_id}")
    last = st.messages[-1] if st.messages else None
    calls = (
        [c for c in last.content if type(c) is ToolCall] if type(last) is AssistantMessage else []
    )
    if calls != [p.call if p.original is None else p.original for p in st.round]:
        problems.append("the round in flight is not the last reply's calls")
    return problems
