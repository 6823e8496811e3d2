"""The loop's guards: their limits as plain data in the spec, and each one's check.

Each guard counts on its own (turns, time, context, cost, repeated calls, rounds without
progress, rounds of failures). The checks only read the loop's state and return what they
find (`_record` writes the counts): the loop asks them, then looks its move up in the table.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_FINALIZE_PROMPT",
    "FINALIZABLE",
    "STALL_PERIODS",
    "Checks",
    "Guards",
    "estimate_tokens",
    "message_tokens",
    "part_tokens",
]

import math
from collections.abc import Iterable
from zlib import crc32

import msgspec

from ._commands import StopReason
from ._errors import InvalidSpec
from ._fields import check_fields
from ._messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Message,
    Opaque,
    Part,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    UserMessage,
    UserPart,
)
from ._state import LoopState

DEFAULT_FINALIZE_PROMPT = (
    "You have run out of budget for tools. Do not call any tool. Using only what you have "
    "found so far, give your best final answer now, and say what is still unverified."
)


class Guards(msgspec.Struct, frozen=True, kw_only=True):
    """The loop's hard limits, each counted on its own. `None` switches a guard off.

    `max_turns` counts model round-trips (and the tools each caused), never history length.
    The context guard stops once the next request would leave less than `reserve_tokens` of
    `context_window` free, so the final answer still fits. `max_model_retries` counts the loop's
    own retries after a first failed attempt, apart from any retries inside the SDK; the n-th
    waits `retry_backoff_s * 2**n` (at most `retry_backoff_max_s`) less a random half, and never
    less than the provider's `retry-after`. Time spent waiting only for a human's approval does
    not count towards `deadline_s`. `max_output_retries`: how many times a final answer that
    fails `LoopSpec.output` goes back to the model before the run stops with `invalid_output`.
    `max_cost`: what a run may spend, priced by `LoopSpec.prices` (the final answer's call comes
    on top, as the reserve does for the context).
    """

    max_turns: int | None = 50
    deadline_s: float | None = 600.0
    context_window: int | None = 128_000
    reserve_tokens: int = 18_000
    max_repeated_calls: int | None = 5
    max_stalled_rounds: int | None = 3
    max_failed_rounds: int | None = 3
    max_model_retries: int = 2
    max_output_retries: int = 2
    max_cost: float | None = None
    finalize: bool = True
    finalize_prompt: str = DEFAULT_FINALIZE_PROMPT
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max_repeated_calls is not None and self.max_repeated_calls < 2:
            raise InvalidSpec(
                "counts repeats: use 2 or more, or None", field="Guards.max_repeated_calls"
            )
        for name in ("max_turns", "max_stalled_rounds", "max_failed_rounds"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidSpec("must be 1 or more, or None", field=f"Guards.{name}")
        for name in ("max_model_retries", "max_output_retries", "reserve_tokens"):
            if getattr(self, name) < 0:
                raise InvalidSpec("cannot be negative", field=f"Guards.{name}")
        if self.context_window is not None and self.context_window <= self.reserve_tokens:
            raise InvalidSpec(
                f"must be larger than reserve_tokens ({self.reserve_tokens}): every run would "
                "stop before its first call",
                field="Guards.context_window",
            )
        if self.finalize and not self.finalize_prompt.strip():
            raise InvalidSpec(
                "cannot be blank: it is the final request's", field="Guards.finalize_prompt"
            )
        if self.max_cost is not None and not 0 < self.max_cost < math.inf:
            raise InvalidSpec("must be more than 0, or None", field="Guards.max_cost")
        if not 0 <= self.retry_backoff_s <= self.retry_backoff_max_s < math.inf:
            raise InvalidSpec(
                "retry_backoff_s and retry_backoff_max_s: 0 <= base <= max",
                field="Guards.retry_backoff_s",
            )


STALL_PERIODS = 3
"""The no-progress guard finds cycles of 1 to this many rounds (A-A-A, A-B-A-B, A-B-C-A-B-C)."""

FINALIZABLE = frozenset(
    {StopReason.max_turns, StopReason.deadline, StopReason.context_budget, StopReason.cost_budget}
)
"""The budgets: when one runs out, the loop may first ask for a final answer without tools."""

# keys sorted: equal arguments encode equal whatever their order ("deterministic" sorts dict keys
# like "sorted" does, and costs less)
canonical = msgspec.json.Encoder(order="deterministic")


def estimate_tokens(text: str) -> int:
    """A deliberately generous token estimate (about 3 UTF-8 bytes a token) for budgeting."""
    size = len(text) if text.isascii() else len(text.encode())  # isascii is O(1): no copy
    return (size + 2) // 3


IMAGE_TOKENS = 1_600
"""An image's estimate: what the providers charge for one of about 1,100 × 1,100 pixels."""
PDF_BYTES_PER_TOKEN = 40
"""A PDF's estimate: its pages are read as text and as images, about 3,000 tokens a 120 KB page."""
AUDIO_BYTES_PER_TOKEN = 1_000
"""Audio's estimate: 16 kHz 16-bit sound is 32 KB a second, which OpenAI counts as ~32 tokens."""


def _media_tokens(p: Image | Document | Audio) -> int:
    if type(p) is Image:
        return IMAGE_TOKENS
    if p.data is None:  # known only by reference: count it as a page
        return IMAGE_TOKENS
    if type(p) is Audio:
        return len(p.data) // AUDIO_BYTES_PER_TOKEN + 1
    if (p.media_type or "").startswith("text/"):
        return (len(p.data) + 2) // 3
    return max(IMAGE_TOKENS, len(p.data) // PDF_BYTES_PER_TOKEN)


def part_tokens(parts: str | Iterable[Part | UserPart | ResultPart]) -> int:
    if isinstance(parts, str):
        return estimate_tokens(parts)
    total = 0
    for p in parts:
        if type(p) is Text or type(p) is Thinking:
            total += estimate_tokens(p.text)
        elif type(p) is ToolCall:
            total += estimate_tokens(p.raw_arguments or canonical.encode(p.arguments).decode())
        elif type(p) is Opaque:
            total += estimate_tokens(canonical.encode(p.data).decode())
        else:
            total += _media_tokens(p)  # type: ignore[arg-type]
    return total


def message_tokens(message: Message) -> int:
    match message:
        case UserMessage(content=content):
            return part_tokens(content)
        case AssistantMessage(content=parts):
            return part_tokens(parts)
        case ToolResults(results=results):
            return sum(part_tokens(r.content) for r in results)
        case Instructions(text=text):
            return estimate_tokens(text)
    raise TypeError(f"not a message: {message!r}")


class Checks:
    """A spec's guards as plain values (the spec is frozen; they are read on every turn), and
    each guard's check, written once."""

    __slots__ = (
        "backoff",
        "budget",
        "deadline_s",
        "max_cost",
        "max_failed",
        "max_retries",
        "max_turns",
        "repeats",
        "stall",
    )

    def __init__(self, guards: Guards) -> None:
        self.deadline_s = guards.deadline_s
        self.max_turns = guards.max_turns
        self.budget = (
            None if guards.context_window is None else guards.context_window - guards.reserve_tokens
        )
        self.max_cost = guards.max_cost
        self.max_failed = guards.max_failed_rounds
        self.max_retries = guards.max_model_retries
        self.backoff = (guards.retry_backoff_s, guards.retry_backoff_max_s)
        self.repeats = guards.max_repeated_calls
        self.stall = guards.max_stalled_rounds

    def deadline(self, state: LoopState) -> float | None:
        """When the deadline falls; None without one, or while only a human is awaited (that
        time is not the run's, so the deadline moves on by as much)."""
        if self.deadline_s is None or state.started_at is None or state.waiting_since is not None:
            return None
        return state.started_at + state.waited_s + self.deadline_s

    def deadline_passed(self, state: LoopState, now: float) -> bool:
        """The run's own time at `now` (not counting waits for a human) reached the deadline."""
        limit, started = self.deadline_s, state.started_at
        if limit is None or started is None:
            return False
        waiting = state.waiting_since
        paused = state.waited_s if waiting is None else state.waited_s + now - waiting
        return now - started - paused >= limit

    def retry_wait(self, retries: int, retry_after: float | None, seed: str) -> float:
        """How long to wait before retry number `retries` (0 for the first): exponential, less a
        random half (the randomness drawn from `seed`, a failed call's id, so a replay waits the
        same), and never less than the provider asked for."""
        base, most = self.backoff
        jitter = 0.5 + 0.5 * crc32(seed.encode()) / 2**32
        return max(min(most, base * 2**retries) * jitter, retry_after or 0.0)

    def before_turn(self, state: LoopState) -> StopReason | None:
        """The first of the other guards that stops the run before its next model call (after
        the deadline), checked in this order: turns, context, cost, failed rounds, no
        progress."""
        if self.max_turns is not None and state.turns >= self.max_turns:
            return StopReason.max_turns
        if self.budget is not None and state.context_tokens > self.budget:
            return StopReason.context_budget
        if self.max_cost is not None and state.cost - state.cost_before >= self.max_cost:
            return StopReason.cost_budget
        if self.max_failed is not None and state.failed_rounds >= self.max_failed:
            return StopReason.tool_errors
        k = self.stall
        digests = state.round_digests
        # a cycle can only end here if the last round repeats one of the few before it
        if k is not None and digests and digests[-1] in digests[-1 - STALL_PERIODS : -1]:
            return StopReason.no_progress if _stalled(digests, k) else None
        return None

    def repeated(
        self, counts: dict[str, int], counted: dict[str, int], call: ToolCall
    ) -> str | None:
        """Count `call` by name and arguments in `counted` (this reply's tally over `counts`,
        the run's); once the same call reaches the limit, say so."""
        key = call.name + "\0" + canonical.encode(call.arguments).decode()
        count = counted[key] = counted.get(key, counts.get(key, 0)) + 1
        if self.repeats is not None and count >= self.repeats:
            return f"{call.name} was already called {count - 1} times with these arguments"
        return None

    def round_key(self, digest: object) -> str:
        """What the no-progress guard keeps of a finished round (`digest`: what its calls and
        results were)."""
        return str(crc32(canonical.encode(digest)))


def _stalled(digests: list[str], k: int) -> bool:
    """True when the last rounds repeat one block of 1 to `STALL_PERIODS` rounds `k` times."""
    n = len(digests)
    for period in range(1, STALL_PERIODS + 1):
        span = period * k
        if n >= span and all(
            digests[n - i] == digests[n - i - period] for i in range(1, span - period + 1)
        ):
            return True
    return False
