"""The exceptions turnstile raises: one short hierarchy rooted at `TurnstileError`."""

from __future__ import annotations

__all__ = [
    "CorruptState",
    "HistoryProblem",
    "InvalidHistory",
    "InvalidObservation",
    "InvalidSpec",
    "ModelError",
    "ProtocolError",
    "TurnstileError",
]

from typing import NamedTuple


class TurnstileError(Exception):
    """Base class of every error turnstile raises on purpose."""


class ProtocolError(TurnstileError):
    """An observation the loop cannot accept now; the loop's state is left exactly as it was."""


class InvalidObservation(ProtocolError):
    """What the caller handed the loop is not what it must be: a field of the wrong type, a number
    that is not finite, a time before the last one. `path` names the field (`response.content`);
    the loop's state is left exactly as it was."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class InvalidSpec(TurnstileError, ValueError):
    """A spec (`LoopSpec`, `Guards`, `ToolSpec`...) built with a field no run can use; `field`
    names it (`LoopSpec.tools[0]`) and the message says what to give instead."""

    def __init__(self, message: str, *, field: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class HistoryProblem(NamedTuple):
    """One violation found by `validate_history`: where it is and which call it concerns."""

    position: int
    call_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"message {self.position}"
        return f"{where}: {self.message}" + (f" (call {self.call_id})" if self.call_id else "")


class InvalidHistory(TurnstileError):
    """A message list that breaks the ledger's rules (pairing, alternation, content)."""

    def __init__(self, problems: list[HistoryProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

    @property
    def call_ids(self) -> list[str]:
        return [p.call_id for p in self.problems if p.call_id is not None]

    @property
    def positions(self) -> list[int]:
        return [p.position for p in self.problems]


class CorruptState(TurnstileError):
    """A dump that cannot be loaded: not ours, damaged, or written by a newer schema."""


class ModelError(TurnstileError):
    """A model call failed; model clients raise it and executors turn it into `ModelFailed`.

    `kind` names the failure as the provider did (`rate_limit_error`, `authentication_error`...),
    so a caller can tell a 401 from a 429 without reading the message; `retry_after` is the wait
    in seconds the provider asked for before a retry (`retry-after`), if it said one; `status`
    the HTTP status of the failure, if it had one; `model` the model that failed, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        kind: str = "",
        retry_after: float | None = None,
        status: int | None = None,
        model: str | None = None,
    ) -> None:
        self.message = message
        self.retryable = retryable
        self.kind = kind
        self.retry_after = retry_after
        self.status = status
        self.model = model
        super().__init__(message)
