"""Observations: facts the executor reports back. Past tense, frozen, tagged, each timestamped.

`now` comes from the executor's monotonic clock; the loop never reads a clock of its own.
"""

from __future__ import annotations

__all__ = [
    "Approved",
    "Cancelled",
    "Denied",
    "Event",
    "GuardrailChecked",
    "ModelFailed",
    "ModelReplied",
    "Observation",
    "Resumed",
    "Started",
    "Tick",
    "ToolReturned",
    "ToolStarted",
]

from typing import Annotated, Any

import msgspec

from ._messages import Message, ModelResponse, ResultPart, Usage
from ._tools import ToolSpec


class Observation(
    msgspec.Struct,
    frozen=True,
    gc=False,
    kw_only=True,
    tag_field="type",
    forbid_unknown_fields=True,
):
    """Base of every observation."""

    now: float


class ModelReplied(Observation, frozen=True, omit_defaults=True, tag="model_replied"):
    """The model call `command_id` answered. `model`: which model did; when the executor leaves
    it out, the loop records the one its request named (`LoopSpec.models`)."""

    command_id: str
    response: ModelResponse
    model: str | None = None


class ModelFailed(Observation, frozen=True, omit_defaults=True, tag="model_failed"):
    """The model call `command_id` failed. `kind`, `retry_after` and `status` are `ModelError`'s:
    what the provider called the failure, how long it asked to wait before asking again, and
    the HTTP status. `model`, as for `ModelReplied`: the model that failed."""

    command_id: str
    message: str
    retryable: bool = False
    kind: str = ""
    retry_after: float | None = None
    model: str | None = None
    status: int | None = None


class ToolReturned(Observation, frozen=True, tag="tool_returned"):
    """The call `call_id` returned: text, or parts (a tool may return images, documents).
    `usage` and `cost`: what the call spent on model calls of its own (a sub-agent's run),
    added to the run's totals and budgets; unset, they are left out of the event as written."""

    call_id: str
    content: str | list[ResultPart]
    is_error: bool = False
    usage: Usage | msgspec.UnsetType = msgspec.UNSET
    cost: Annotated[float, msgspec.Meta(ge=0)] | msgspec.UnsetType = msgspec.UNSET


class ToolStarted(Observation, frozen=True, tag="tool_started"):
    """The executor is about to run the call `call_id`: its intent, recorded before any effect.
    After a crash, a call that started but never returned may have taken effect."""

    call_id: str


class Resumed(Observation, frozen=True, tag="resumed"):
    """A new process took the run over (from a dump or a journal). Calls it finds started but
    unanswered are run again if replay-safe, else answered as interrupted; everything still
    awaited (a model call, calls, approvals) is handed out again."""


class Approved(Observation, frozen=True, omit_defaults=True, tag="approved"):
    """A human lets the call `call_id` run: as the model made it, or with `arguments` in its
    place, which must fit the tool's `parameters` (else `InvalidObservation`, the state as it
    was). The model's call stays in the conversation as it made it, and its result tells the
    model the arguments it ran with."""

    call_id: str
    arguments: dict[str, Any] | None = None


class Denied(Observation, frozen=True, tag="denied"):
    call_id: str
    reason: str = ""


class GuardrailChecked(Observation, frozen=True, omit_defaults=True, tag="guardrail_checked"):
    """The check `check_id` (a `CheckGuardrail`) answered: it passed, or it `tripped`, saying
    why in `message`; a trip finishes the run (`StopReason.guardrail`)."""

    check_id: str
    tripped: bool
    message: str = ""


class Tick(Observation, frozen=True, tag="tick"):
    """Time passed; lets the deadline guard fire while nothing else happens."""


class Cancelled(Observation, frozen=True, tag="cancel"):
    """The run was called off (a user, a shutdown): results are written, and it finishes."""

    reason: str = ""


class Started(Observation, frozen=True, omit_defaults=True, tag="started"):
    """The first entry of every event log: the conversation `Loop.start` was given, and the
    tools the run offers (given for it, a runner's or an MCP server's, or else the spec's), so
    that a replay decides the same without whoever supplied them. Logs from before every run
    recorded its tools hold none: the spec's are taken."""

    messages: list[Message]
    tools: tuple[ToolSpec, ...] = ()


Event = (
    Started
    | ModelReplied
    | ModelFailed
    | ToolStarted
    | ToolReturned
    | Approved
    | Denied
    | GuardrailChecked
    | Tick
    | Cancelled
    | Resumed
)
