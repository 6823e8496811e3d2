"""Commands: what the loop tells its executor to do next. Imperative, frozen, tagged."""

from __future__ import annotations

__all__ = [
    "AwaitApproval",
    "CallModel",
    "CheckGuardrail",
    "Command",
    "FinalAnswer",
    "Finish",
    "ModelRequest",
    "Purpose",
    "RunTool",
    "StopReason",
]

import enum
from collections.abc import Sequence
from typing import Any

import msgspec

from ._guardrails import GuardrailKind
from ._messages import Message, ToolCall
from ._request import CachePolicy, OutputFormat, ServerTool, ToolChoice
from ._tools import ToolSpec


class StopReason(enum.StrEnum):
    """Why a run ended. `unknown` is the initial value: no `Finish` ever carries it."""

    unknown = "unknown"
    completed = "completed"
    finish_tool = "finish_tool"
    stop_condition = "stop_condition"
    max_turns = "max_turns"
    deadline = "deadline"
    context_budget = "context_budget"
    cost_budget = "cost_budget"
    repeated_call = "repeated_call"
    no_progress = "no_progress"
    tool_errors = "tool_errors"
    model_error = "model_error"
    max_tokens = "max_tokens"
    refusal = "refusal"
    requires_action = "requires_action"
    cancelled = "cancelled"
    invalid_output = "invalid_output"
    guardrail = "guardrail"


class Purpose(enum.StrEnum):
    """What a model call is for: a turn, the final answer once a budget ran out, or a summary of
    the conversation's older turns (`Compaction` with `strategy="summarize"`)."""

    turn = "turn"
    finalize = "finalize"
    summarize = "summarize"


class ModelRequest(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """Everything one model call needs, in neutral form; providers encode it for the wire.

    `tool_choice`: whether the model may, must or may not call tools. `server_tools`: tools the
    provider runs, each for its format. `cache`: the caching policy (None: none), `cache_key`
    the conversation's key for providers that take one. `output`: the answer's shape, for a
    format's native structured output. `model`: the model to ask, from `LoopSpec.models` (None:
    the client's own).
    """

    system: str | None
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    max_tokens: int
    purpose: Purpose = Purpose.turn
    tool_choice: ToolChoice = "auto"
    server_tools: Sequence[ServerTool] = ()
    cache: CachePolicy | None = None
    cache_key: str | None = None
    output: OutputFormat | None = None
    model: str | None = None


class Command(msgspec.Struct, frozen=True, gc=False, tag_field="type", forbid_unknown_fields=True):
    """Base of every command."""


class CallModel(Command, frozen=True, omit_defaults=True, tag="call_model"):
    """Send `request` to the model. `not_before`, on a retry: not before this time (on the clock
    that stamps observations), the backoff the loop decided."""

    id: str
    request: ModelRequest
    not_before: float | None = None


class RunTool(Command, frozen=True, tag="run_tool"):
    """Run one tool call; its `id` is the model's call id, echoed by `ToolReturned.call_id`."""

    id: str
    name: str
    arguments: dict[str, Any]


class AwaitApproval(Command, frozen=True, tag="await_approval"):
    """Ask a human whether the call `id` may run; answer with `Approved` or `Denied`."""

    id: str
    name: str
    arguments: dict[str, Any]


class FinalAnswer(msgspec.Struct, frozen=True, gc=False, tag="final_answer"):
    """What a final guardrail checks: the answer's text (the last reply's), and the answer as
    `Finish.output` would carry it (typed when `LoopSpec.output` types it)."""

    text: str
    output: Any = None


class CheckGuardrail(Command, frozen=True, tag="check_guardrail"):
    """Run the guardrail `name` on `subject` and answer with `GuardrailChecked(check_id=id)`:
    the run's input messages (`on="input"`), a tool call of the round (`"tool_call"`: none of
    the round's calls runs until every check of it answered), or the `FinalAnswer`
    (`"final"`: the run finishes with it only once every check answered)."""

    id: str
    name: str
    on: GuardrailKind
    subject: list[Message] | ToolCall | FinalAnswer


class Finish(Command, frozen=True, tag="finish"):
    """The run is over. `output`: the final text, the finish tool's arguments, or the answer
    as `LoopSpec.output` types it."""

    reason: StopReason
    output: Any = None
