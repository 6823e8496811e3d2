"""A round: one reply's tool calls on their way to results, and how it is closed early.

The loop holds the round in flight in `LoopState.round`, a `PendingCall` per call. Whatever ends
a round before every call has returned (a guard, a cancel, a refusal) closes it here: every call
gets a result, written in call order, so the history stays valid whatever comes next.
"""

from __future__ import annotations

__all__ = ["REUSED", "close", "refuse", "renamed", "resolve"]

import msgspec

from ._messages import Part, ToolCall, ToolResult, ToolResults
from ._state import CallStatus, LoopState, PendingCall

REUSED = (
    "not run: this call came with the id {0!r} of an earlier call in the same reply. "
    "Make it again, if it is still needed."
)


def resolve(p: PendingCall, error: str) -> None:
    p.status, p.result = CallStatus.done, ToolResult(p.call.id, error, True)


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
        if p.status is CallStatus.running:
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
