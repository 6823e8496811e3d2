"""What a deciding method of `Step` returns: a plan, and the plans every step uses."""

from __future__ import annotations

__all__ = ["ASKING", "DEADLINE", "WAITING", "WRITTEN", "Plan", "finish", "planned"]

from typing import Any

from ._commands import StopReason
from ._machine import ASK, FINISH, WAIT
from ._messages import ToolCall

Plan = tuple[Any, ...]
"""What a deciding method returns: `(decision, args)` for `apply`; or `(write, args, then,
given)`: first a `_record` writer to call with `args` (the state first), then the deciding
`then(given)` (`given` is `WRITTEN`: what the writer returned) for the plan after it."""

WAITING: Plan = (WAIT, ())
ASKING: Plan = (ASK, ())
WRITTEN = object()  # `given` for a plan that reads what its write returned
DEADLINE = "the run's deadline passed"
_NONE: list[ToolCall] = []  # no calls (never written to)


def finish(reason: StopReason, output: Any, why: str = "", refused: list[ToolCall] = _NONE) -> Plan:
    """Finish the run for `reason` with `output`; calls left open (or `refused`, a reply's
    calls that will never run) get results saying `why`."""
    return (FINISH, (reason, output, why, refused))


def planned(plan: Plan) -> Plan:
    """What follows a write whose next plan was known before it."""
    return plan
