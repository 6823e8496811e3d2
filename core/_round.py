"""A round: one reply's tool calls on their way to results, and which of them may start.

The loop holds the round in flight in `LoopState.round`, a `PendingCall` per call. This module
only reads it: `opened` says what a reply's calls become (a result for those that cannot run, a
wait for approval, a place in the queue), `schedule` which queued calls may start now and what
the round then waits for; `_record` writes the round, and `Step.apply` starts the calls.
"""

from __future__ import annotations

__all__ = ["ASKED", "BUSY", "INTERRUPTED", "REUSED", "Opened", "opened", "schedule"]

from collections.abc import Mapping, Set

from ._guards import Checks
from ._messages import ToolCall, ToolResult
from ._output import Output, answered
from ._state import CallStatus, PendingCall
from ._tools import ToolSpec, call_problem

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
_APPROVAL = CallStatus.approval
BUSY = frozenset({_RUNNING, _STARTED})  # a RunTool went out: the call may be running
ASKED = frozenset({_APPROVAL})


Opened = tuple[list[PendingCall], dict[str, int], str | None, int, list[PendingCall]]
"""A reply's calls as a round (`opened`): the round; this reply's calls by name and arguments,
for the repeats guard; why that guard stops the run, if it does; how many answers (the output
tool's) failed `LoopSpec.output`; the calls that need a human's approval. A plain tuple: a
`NamedTuple` costs a Python-level call to build, on every turn's path."""


def opened(
    calls: list[ToolCall],
    tools: Mapping[str, ToolSpec],
    reused: Mapping[str, str],
    output: Output | None,
    checks: Checks,
    counts: dict[str, int],
) -> Opened:
    """What the reply's `calls` become: a result for each that cannot run (an unknown tool,
    arguments cut off or not JSON, an id the reply gave an earlier call: `reused`) and for a
    finishing tool's; a wait for approval; else a place in the queue. Repeats are counted over
    `counts`. Writes nothing."""
    counted: dict[str, int] = {}
    repeated = None
    wrong = 0
    round_: list[PendingCall] = []
    asks: list[PendingCall] = []
    for call in calls:
        spec = tools.get(call.name)
        if call.id in reused:
            p = _resolved(call, REUSED.format(reused[call.id]))
        elif spec is None or not call.complete or call.raw_arguments is not None:
            p = _resolved(call, call_problem(call, tools))
        elif spec.finish:
            result = answered(output, call)
            wrong += result.is_error
            p = PendingCall(call, _DONE, result)
        else:
            again = checks.repeated(counts, counted, call)
            if again is not None and repeated is None:
                repeated = again
                p = PendingCall(call, _QUEUED)
            elif spec.needs_approval:
                p = PendingCall(call, _APPROVAL)
                asks.append(p)
            else:
                p = PendingCall(call, _QUEUED)
        round_.append(p)
    return round_, counted, repeated, wrong, asks


def _resolved(call: ToolCall, error: str) -> PendingCall:
    """A call of the reply that will not run, with its error result."""
    return PendingCall(call, _DONE, ToolResult(call.id, error, True))


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
