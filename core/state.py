"""The parts of a `LoopState` an executor reads: where the loop is (`Phase`), the round's calls
(`PendingCall`, with their `CallStatus`), the guardrail checks outstanding (`PendingCheck`),
the compactions made (`Compacted`), and the result a
call gets when the run stopped while it ran (`INTERRUPTED`)."""

__all__ = ["INTERRUPTED", "CallStatus", "Compacted", "PendingCall", "PendingCheck", "Phase"]

from ._machine import Phase as Phase
from ._round import INTERRUPTED as INTERRUPTED
from ._state import CallStatus as CallStatus
from ._state import Compacted as Compacted
from ._state import PendingCall as PendingCall
from ._state import PendingCheck as PendingCheck
