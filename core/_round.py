"""A round: one reply's tool calls on their way to results, and how it is closed early.

The loop holds the round in flight in `LoopState.round`, a `PendingCall` per call. Whatever ends
a round before every call has returned (a guard, a cancel, a refusal) closes it here: every call
gets a result, written in call order, so the history stays valid whatever comes next.
"""

from __future__ import annotations

__all__ = [
    "ASKED",
    "BUSY",
    "INTERRUPTED",
    "REUSED",
    "close",
    "find",
    "interrupt",
    "refuse",
    "renamed",
    "resolve",
    "schedule",
]

from collections.abc import Mapping, Set

import msgspec

from ._commands import Command, RunTool
from ._errors import ProtocolError
from ._messages import Part, ToolCall, ToolResult, ToolResults
from ._observations import Approved, Denied, ToolReturned, ToolStarted
from ._state import CallStatus, LoopState, PendingCall
from ._tools import ToolSpec

INTERRUPTED = (
    "interrupted: the run stopped while this call was running, so it may or may not have taken "
    "effect. Check before making it again."
)
"""The result of a call that started and never returned, unless its tool is replay-safe; an
executor that loses such a call itself (a Temporal worker that died) gives it too."""
REUSED = (
    "not run: this call came with the id {0!r} of an earlier call in the same reply. "
    "Make it again, if it is still needed."
)


def resolve(p: PendingCall, error: str) -> None:
    p.status, p.result = CallStatus.done, ToolResult(p.call.id, error, True)


def find(
    st: LoopState, obs: Approved | Denied | ToolStarted | ToolReturned, want: Set[CallStatus]
) -> PendingCall:
    """The call of the round in flight that `obs` answers, whose status must be one of `want`;
    else a `ProtocolError` saying what the call is."""
    found = None
    for p in st.round:
        if p.call.id == obs.call_id:
            if p.status in want:
                return p
            found = p
    wanted = " or ".join(sorted(s.value for s in want))
    raise ProtocolError(
        f"{type(obs).__name__}(call_id={obs.call_id!r}) does not match a call that is "
        f"{wanted} (that call is {'unknown' if found is None else found.status.value})"
    )


def interrupt(st: LoopState, tools: Mapping[str, ToolSpec]) -> None:
    """After a crash: a call that started but never returned may have taken effect. Run it
    again if its tool is replay-safe; else its result says it was interrupted."""
    for p in st.round:
        if p.status is CallStatus.started:
            spec = tools.get(p.call.name)
            if spec is not None and spec.replay_safe:
                p.status = CallStatus.running
            else:
                resolve(p, INTERRUPTED)


_UNLISTED = ToolSpec(name="")
_NO_RESOURCES: frozenset[str] = frozenset()
_DONE, _QUEUED, _RUNNING, _STARTED = (  # read once: each `Enum.member` lookup costs a call
    CallStatus.done,
    CallStatus.queued,
    CallStatus.running,
    CallStatus.started,
)
BUSY = frozenset({_RUNNING, _STARTED})  # a RunTool went out: the call may be running
ASKED = frozenset({CallStatus.approval})


def schedule(
    round_: list[PendingCall], tools: Mapping[str, ToolSpec]
) -> tuple[list[Command], Set[CallStatus] | None]:
    """Start every queued call that may overlap with what is running, in call order: the
    `RunTool`s, and what the round waits for now (`BUSY`: calls running; `ASKED`: only a human;
    None: nothing, every call has its result).

    A call that is not parallel-safe waits for all calls before it and holds back all calls
    after it; calls naming the same resource run one after another.
    """
    commands: list[Command] = []
    busy = _NO_RESOURCES
    running = False
    earlier = False  # an earlier call has no result yet
    for p in round_:
        status = p.status
        if status is _DONE:
            continue
        spec = tools.get(p.call.name, _UNLISTED)
        if status is _QUEUED and (spec.resource is None or spec.resource not in busy):
            if spec.parallel_safe or not earlier:
                p.status = status = _RUNNING
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
        running = running or status is _RUNNING or status is _STARTED
        earlier = True
        if not spec.parallel_safe:
            break
        if spec.resource is not None:
            busy = busy | {spec.resource}
    return commands, BUSY if running else ASKED if earlier else None


def refuse(st: LoopState, calls: list[ToolCall], why: str) -> None:
    """Write calls that will never run, each with an error result, so pairing holds."""
    if calls:
        st.round = [PendingCall(c, CallStatus.queued) for c in calls]
        close(st, why)


def close(st: LoopState, why: str) -> None:
    """Give every call still without a result an error result saying `why`, and write the
    round: results first, so the history stays valid whatever is decided next."""
    if not st.round:
        return
    for p in st.round:
        if p.status is CallStatus.running or p.status is CallStatus.started:
            resolve(p, f"no result: {why} before this call returned")
        elif p.status is not CallStatus.done:
            resolve(p, f"not run: {why}")
    st.messages.append(ToolResults([p.result for p in st.round]))  # type: ignore[misc]
    st.round = []


def renamed(content: list[Part]) -> tuple[list[Part], list[ToolCall], dict[str, str]]:
    """A reply whose calls share an id, each repeat given a fresh one so every result can say
    which call it answers: the content, its calls, and each new id's old one."""
    ids = {p.id for p in content if type(p) is ToolCall}
    seen: set[str] = set()
    parts: list[Part] = []
    reused: dict[str, str] = {}
    for part in content:
        if type(part) is ToolCall:
            if part.id in seen:
                n, new = 2, f"{part.id}_2"
                while new in ids:
                    n, new = n + 1, f"{part.id}_{n + 1}"
                ids.add(new)
                reused[new] = part.id
                part = msgspec.structs.replace(part, id=new)
            seen.add(part.id)
        parts.append(part)
    return parts, [p for p in parts if type(p) is ToolCall], reused
