"""The loop's whole state as plain data, and its dump format.

A dump is JSON: `{"schema": N, "state": {...}}`. New fields always get defaults, so a dump from
an older schema loads; a newer schema or damaged bytes raise `CorruptState` saying why. Schema 2
moved the reason a finalizing run stops for from `state.finalizing` to `state.stop_reason`: an
older turnstile must refuse such a dump, not read it as finalizing for nothing.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "CallStatus", "LoopState", "PendingCall", "dump_state", "load_state"]

import enum
from typing import Any

import msgspec

from ._commands import StopReason
from ._errors import CorruptState, InvalidHistory
from ._history import History, history_problems
from ._machine import PHASES
from ._messages import Message, ToolCall, ToolResult, Usage
from ._observations import Event

SCHEMA_VERSION = 2


class CallStatus(enum.StrEnum):
    queued = "queued"  # may run once the calls it must not overlap have returned
    approval = "approval"  # waits for a human's Approved / Denied
    running = "running"  # a RunTool went out
    done = "done"  # has its result


class PendingCall(msgspec.Struct, gc=False, omit_defaults=True):
    """One call of the round in flight (untracked by the GC: it holds no cycle)."""

    call: ToolCall
    status: CallStatus
    result: ToolResult | None = None


class LoopState(msgspec.Struct, kw_only=True):
    """Everything the loop knows. Mutated only by `Loop`; dump it after any step.

    A round is one reply's tool calls and their results; `round` holds the one in flight.
    `stop_reason` is set once the loop knows why the run ends, which in phase `finalizing` is
    before the run is done.
    """

    phase: str = "idle"
    messages: list[Message] = msgspec.field(default_factory=list)
    turns: int = 0
    usage: Usage = Usage()
    started_at: float | None = None
    model_calls: int = 0
    pending_model: str | None = None
    retries: int = 0
    round: list[PendingCall] = msgspec.field(default_factory=list, name="batch")
    context_tokens: int = 0
    call_counts: dict[str, int] = msgspec.field(default_factory=dict)
    round_digests: list[str] = msgspec.field(default_factory=list)
    failed_rounds: int = 0
    stop_reason: StopReason = StopReason.unknown
    output: Any = None
    events: list[Event] = msgspec.field(default_factory=list)

    @property
    def outstanding(self) -> list[PendingCall]:
        """Calls of the round in flight that have no result yet."""
        return [p for p in self.round if p.status is not CallStatus.done]


class _Dump(msgspec.Struct):
    schema: int
    state: LoopState


class _Header(msgspec.Struct):
    schema: int


class _Finalizing(msgspec.Struct):
    finalizing: StopReason | None = None


class _Schema1(msgspec.Struct):
    """Schema 1 kept the reason a run was finalizing for in `state.finalizing`."""

    state: _Finalizing


def _enc_hook(obj: object) -> object:
    if isinstance(obj, History):
        return list(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_header = msgspec.json.Decoder(_Header)
_decoder = msgspec.json.Decoder(_Dump)
_schema_1 = msgspec.json.Decoder(_Schema1)


def dump_state(state: LoopState) -> bytes:
    return ENCODER.encode(_Dump(SCHEMA_VERSION, state))


def load_state(data: bytes | str) -> LoopState:
    """Decode a dump, raising `CorruptState` with the reason when it cannot be used: not a
    dump, damaged, newer, or a state no loop could be in (an unknown phase, a broken history)."""
    try:
        schema = _header.decode(data).schema
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptState(f"not a turnstile state dump: {e}") from None
    if schema > SCHEMA_VERSION:
        raise CorruptState(
            f"dump has schema {schema}, newer than this turnstile's {SCHEMA_VERSION}; upgrade"
        )
    try:
        state = _decoder.decode(data).state
        if schema < 2 and state.phase == "finalizing":
            state.stop_reason = _schema_1.decode(data).state.finalizing or StopReason.unknown
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptState(f"damaged state dump: {e}") from None
    if state.phase not in PHASES:
        raise CorruptState(f"unknown phase {state.phase!r}")
    if state.phase == "finalizing" and state.stop_reason is StopReason.unknown:
        raise CorruptState("the state is finalizing, but for no stop reason")
    pending = state.phase in ("awaiting_tools", "awaiting_approval")  # a round is in flight
    problems = history_problems(state.messages, allow_pending=pending)
    if problems:
        raise CorruptState(f"state holds an invalid history: {InvalidHistory(problems)}")
    return state
