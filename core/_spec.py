"""What a loop is configured with: its tools, its guards and its stop conditions.

All plain data, so a spec can be logged or shipped beside a dumped state; only user-supplied
predicates in `stop_when` are code.
"""

from __future__ import annotations

__all__ = ["Guards", "HasToolCall", "LoopSpec", "StepCountIs", "TextContains", "ToolSpec"]

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ._messages import AssistantMessage, ToolCall, text_of

if TYPE_CHECKING:
    from ._state import LoopState


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool as the model sees it, plus how the loop may schedule it.

    `parallel_safe=False`: overlaps with no other call. `resource`: calls naming the same resource
    never overlap each other. `finish`: calling it ends the run, its arguments being the output.
    `needs_approval`: a human must approve each call first. `timeout_s`: for executors.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=_empty_object)
    parallel_safe: bool = True
    resource: str | None = None
    finish: bool = False
    needs_approval: bool = False
    timeout_s: float | None = None


DEFAULT_FINALIZE_PROMPT = (
    "You have run out of budget for tools. Do not call any tool. Using only what you have "
    "found so far, give your best final answer now, and say what is still unverified."
)


class Guards(msgspec.Struct, frozen=True, kw_only=True):
    """The loop's hard limits, each counted on its own. `None` switches a guard off.

    `max_turns` counts model round-trips (and the tools each caused), never history length.
    The context guard stops once the next request would leave less than `reserve_tokens` of
    `context_window` free, so the final answer still fits. `max_model_retries` counts the loop's
    own retries after a first failed attempt, apart from any retries inside the SDK.
    """

    max_turns: int | None = 50
    deadline_s: float | None = 600.0
    context_window: int | None = 128_000
    reserve_tokens: int = 18_000
    max_repeated_calls: int | None = 5
    max_stalled_rounds: int | None = 3
    max_failed_rounds: int | None = 3
    max_model_retries: int = 2
    finalize: bool = True
    finalize_prompt: str = DEFAULT_FINALIZE_PROMPT

    def __post_init__(self) -> None:
        if self.max_repeated_calls is not None and self.max_repeated_calls < 2:
            raise ValueError("Guards.max_repeated_calls counts repeats: use 2 or more, or None")
        for name in ("max_turns", "max_stalled_rounds", "max_failed_rounds"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Guards.{name} must be 1 or more, or None")
        if self.max_model_retries < 0 or self.reserve_tokens < 0:
            raise ValueError("Guards.max_model_retries and reserve_tokens cannot be negative")


class StepCountIs(msgspec.Struct, frozen=True, tag="step_count_is"):
    """Stop once `n` turns have completed."""

    n: int

    def __call__(self, state: LoopState) -> bool:
        return state.turns >= self.n


def _last_reply(state: LoopState) -> AssistantMessage | None:
    for message in reversed(state.messages):
        if type(message) is AssistantMessage:
            return message
    return None


class HasToolCall(msgspec.Struct, frozen=True, tag="has_tool_call"):
    """Stop once the last reply called the tool `name` (after its results are written)."""

    name: str

    def __call__(self, state: LoopState) -> bool:
        reply = _last_reply(state)
        return reply is not None and any(
            type(p) is ToolCall and p.name == self.name for p in reply.content
        )


class TextContains(msgspec.Struct, frozen=True, tag="text_contains"):
    """Stop once the last reply's text contains `text`."""

    text: str

    def __call__(self, state: LoopState) -> bool:
        reply = _last_reply(state)
        return reply is not None and self.text in text_of(reply.content)


StopCondition = StepCountIs | HasToolCall | TextContains | Callable[["LoopState"], bool]


class LoopSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a loop needs besides its state: prompt, tools, guards, stop conditions.

    `stop_when` takes the built-in conditions or any pure predicate of the state; they are checked
    after each turn's results are written.
    """

    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    guards: Guards = Guards()
    stop_when: tuple[Any, ...] = ()
    max_tokens: int = 4096
