"""Which calls of a round may start: `schedule` reads the round and writes nothing."""

from __future__ import annotations

from turnstile.core import ToolSpec
from turnstile.core._round import ASKED, BUSY, schedule
from turnstile.core._state import CallStatus, PendingCall
from turnstile.core.messages import ToolCall, ToolResult


def _call(i: int, name: str, status: CallStatus = CallStatus.queued) -> PendingCall:
    result = ToolResult(f"c{i}", "ok") if status is CallStatus.done else None
    return PendingCall(ToolCall(f"c{i}", name, {}), status, result)


TOOLS = {
    t.name: t
    for t in (
        ToolSpec("a"),
        ToolSpec("serial", parallel_safe=False),
        ToolSpec("db", resource="db"),
        ToolSpec("h", needs_approval=True),
    )
}


def test_scheduling_starts_what_may_overlap_and_changes_no_call() -> None:
    round_ = [_call(0, "a"), _call(1, "db"), _call(2, "db"), _call(3, "serial"), _call(4, "a")]
    before = [p.status for p in round_]
    starts, waits = schedule(round_, TOOLS)
    assert [p.call.id for p in starts] == ["c0", "c1"]  # one per resource; serial waits
    assert waits is BUSY
    assert [p.status for p in round_] == before


def test_a_round_waiting_only_for_a_human_or_for_nothing() -> None:
    assert schedule([_call(0, "h", CallStatus.approval)], TOOLS) == ([], ASKED)
    assert schedule([_call(0, "a", CallStatus.done)], TOOLS) == ([], None)
