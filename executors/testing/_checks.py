"""What a test asks of a run: its tool calls, their names in order, and a valid history."""

from __future__ import annotations

__all__ = ["assert_history_valid", "calls", "trajectory"]

from collections.abc import Sequence
from typing import Any

from turnstile.core import InvalidHistory, LoopState
from turnstile.core.messages import Message, validate_history
from turnstile.executors import Run


def _messages(subject: Run | LoopState | Sequence[Message]) -> Sequence[Message]:
    if isinstance(subject, Run):
        return subject.messages
    if isinstance(subject, LoopState):
        return subject.messages
    return subject


def calls(run: Run) -> list[tuple[str, dict[str, Any]]]:
    """The run's tool calls in order, as (name, arguments)."""
    return run.calls()


def trajectory(run: Run) -> list[str]:
    """The names of the tools the run called, in order."""
    return run.trajectory()


def assert_history_valid(subject: Run | LoopState | Sequence[Message]) -> None:
    """Fail the test, listing every violation, unless the history keeps the loop's rules:
    user/assistant alternation, every tool call paired with exactly one result by id, content
    of the right kind in the right place."""
    try:
        validate_history(_messages(subject))
    except InvalidHistory as e:
        lines = "\n".join(f"  - {p}" for p in e.problems)
        raise AssertionError(f"invalid history:\n{lines}") from None
