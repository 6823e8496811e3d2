"""The loop's hard limits: plain data in the spec, each counted on its own."""

from __future__ import annotations

__all__ = ["DEFAULT_FINALIZE_PROMPT", "Guards"]

import msgspec

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
