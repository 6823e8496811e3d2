"""Errors of the wire layer: bodies we cannot read, and failures the provider reported."""

from __future__ import annotations

__all__ = ["DecodeError", "ProviderError", "UnsupportedContent"]

import math

from turnstile.core import ModelError, TurnstileError

from ._text import heal


class DecodeError(TurnstileError):
    """A response body (or stream event) that does not have the shape its API documents.

    `path` names the offending place, e.g. `choices[0].message` or `content[1].id`. Both are
    healed text (`_text.heal`), since they may quote the reply.
    """

    def __init__(self, path: str, message: str) -> None:
        path, message = heal(path), heal(message)
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class ProviderError(ModelError):
    """The provider reported a failure (an HTTP error, an `error` event, a failed response).

    `kind` is the provider's own error type (`overloaded_error`, `rate_limit_exceeded`, ...);
    `retryable` says whether asking again may succeed, `retry_after` how many seconds the
    provider asked to wait first (None when it did not say, or said no finite, non-negative
    number), `status` the HTTP status, if the failure came with one. Executors turn it into
    `ModelFailed`. `kind` and `message` come from the provider,
    so they are healed text (`_text.heal`): a run can always write them down.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        kind, message = heal(kind), heal(message)
        if retry_after is not None and not 0 <= retry_after < math.inf:
            retry_after = None  # no wait a run could keep: negative, infinite or NaN
        super().__init__(
            f"{kind}: {message}",
            retryable=retryable,
            kind=kind,
            retry_after=retry_after,
            status=status,
        )


class UnsupportedContent(TurnstileError, ValueError):
    """A request holds something its wire `format` cannot carry (`part`: what, e.g. "audio in a
    tool result", "instructions mid-conversation"): refused, never silently dropped."""

    def __init__(self, format: str, part: str) -> None:
        self.format = format
        self.part = part
        super().__init__(f"{format} cannot carry {part}")
