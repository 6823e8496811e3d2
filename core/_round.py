"""A round: one reply's tool calls on their way to results, and which of them may start.

The loop holds the round in flight in `LoopState.round`, a `PendingCall` per call. This module
only reads it: `schedule` says which queued calls may start now and what the round then waits
for; `_record` writes the round, and `Step.apply` starts the calls.
"""

from __future__ import annotations

__all__ = ["ASKED", "BUSY", "INTERRUPTED", "REUSED", "schedule"]

from collections.abc import Mapping, Set

from ._state import CallStatus, PendingCall
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
) -> tuple[list[PendingCall], Set[CallStatus] | None]:
    """Which queued calls may start now, in call order (each may overlap with what runs), and
    what the round then waits for (`BUSY`: calls running; `ASKED`: only a human; None: nothing,
    every call has its result). Writes nothing: `Step.apply` starts them.

    A call that is not parallel-safe waits for all calls before it and holds back all calls
    after it; calls naming the same resource run one after another.
    """
    starts: list[PendingCall] = []
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
                status = _RUNNING
                starts.append(p)
        running = running or status is _RUNNING or status is _STARTED
        earlier = True
        if not spec.parallel_safe:
            break
        if spec.resource is not None:
            busy = busy | {spec.resource}
    return starts, BUSY if running else ASKED if earlier else None
