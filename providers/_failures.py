"""Failures the providers report, read one way in every format: which asking again may cure, which
no retry will (quota and billing), and how long the provider asked to wait first.

An error object (an error body's `error`, an `error` event, a failed Response's `error`) names
its failure by `code` and `type`; `kind` is the first of them that is a string. A kind in
`RETRYABLE` may be retried; a quota or billing failure (`FINAL`, or Anthropic's
`details.error_code` of a spend limit) never is, whatever else says otherwise: the HTTP status
(`insufficient_quota` comes as a 429), `x-should-retry`, or an error type that is also a rate
limit's (Anthropic's spend limits are `rate_limit_error`).

The wait comes from the response headers (`retry-after-ms`, then `retry-after` in seconds or as an
HTTP date, as both SDKs read them), else from the message of a rate limit that has none
("Please try again in 1.5s", as OpenAI's rate limits say even inside a stream). The core decides
when to ask again; the provider layer only reports what was asked.
"""

from __future__ import annotations

__all__ = ["FINAL", "RETRYABLE", "error_failure", "is_final", "wait_in_message", "wait_of"]

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import ProviderError

RETRYABLE = frozenset(
    {
        # Anthropic's types for 429, 500, 504 and 529
        "rate_limit_error",
        "api_error",
        "timeout_error",
        "overloaded_error",
        # OpenAI's: the type of a 5xx, the code of a 429 for requests or tokens per minute, and
        # the codes a failed response or an error event carries for the same troubles
        "server_error",
        "rate_limit_exceeded",
        "server_is_overloaded",
        "service_unavailable_error",
        "vector_store_timeout",
    }
)
"""The error kinds (an error body's type or code) that asking again may cure."""

FINAL = frozenset(
    {
        # OpenAI: no credit left (a 429, or an error event), a hard spend limit, no billing set up
        "insufficient_quota",
        "billing_hard_limit_reached",
        "billing_not_active",
        # Anthropic: the 402 of an account that cannot pay
        "billing_error",
    }
)
"""Quota and billing kinds: final in every format, whatever the status, a header or the type."""

_SPEND_LIMIT = "spend_limit_reached"  # Anthropic's details.error_code, e.g. enforced_spend_…
_TRY_AGAIN = re.compile(  # digits bounded: a wait is a number of seconds, never an overflow
    r"try again in (?:(\d{1,6})h)?(?:(\d{1,6})m(?!s))?(?:(\d{1,9}(?:\.\d{1,9})?)(ms|s))?"
)


def is_final(error: Mapping[str, Any]) -> bool:
    """Whether the error object reports a quota or billing failure, which no retry lifts."""
    names = (error.get("code"), error.get("type"))
    if any(isinstance(name, str) and name in FINAL for name in names):
        return True
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, Mapping) else None
    return isinstance(code, str) and (code in FINAL or code.endswith(_SPEND_LIMIT))


def error_failure(
    error: Any, *, unexplained: bool, keys: tuple[str, ...] = ("code", "type")
) -> ProviderError:
    """The `ProviderError` for an error object from a body or an event (no HTTP status).

    `kind` is the first of `keys` that holds a non-empty string, else `error`; retryable when a
    kind is in `RETRYABLE` and the failure is not final, or, when the object names no kind at
    all, as `unexplained` says. A retryable failure waits as its message asks, if it does.
    Without an object, the failure is `failed` and retryable when `unexplained` (a failed
    Response may carry none), else `error`, with the string given, if any, as its message.
    """
    if not isinstance(error, Mapping):
        if unexplained:
            return ProviderError("failed", "the response failed without saying why", retryable=True)
        said = error if isinstance(error, str) else "the provider reported an error"
        return ProviderError("error", said, retryable=False)
    names = [name for name in map(error.get, keys) if isinstance(name, str) and name]
    given = error.get("message")
    message = given if isinstance(given, str) else "the provider reported an error"
    if is_final(error):
        retryable = False
    else:
        retryable = not RETRYABLE.isdisjoint(names) if names else unexplained
    wait = wait_in_message(message) if retryable else None
    return ProviderError(
        names[0] if names else "error", message, retryable=retryable, retry_after=wait
    )


def wait_of(
    headers: Mapping[str, str] | None, message: str, *, now: Callable[[], float] = time.time
) -> float | None:
    """The seconds the provider asked to wait: `retry-after-ms`, else `retry-after` (seconds or
    an HTTP date, counted from `now`), else what `message` says; None when nothing says it."""
    if headers is not None:
        milliseconds = _number(headers.get("retry-after-ms"))
        if milliseconds is not None:
            return milliseconds / 1000
        after = headers.get("retry-after")
        seconds = _number(after)
        if seconds is not None:
            return seconds
        if after:
            moment = _http_date(after)
            if moment is not None:
                return max(0.0, moment - now())
    return wait_in_message(message)


def wait_in_message(message: str) -> float | None:
    """The wait a message asks for in OpenAI's words ("Please try again in 1.5s", "in 20ms",
    "in 1m30s"), or None."""
    found = _TRY_AGAIN.search(message)
    if found is None or not any(found.groups()):
        return None
    hours, minutes, amount, unit = found.groups()
    seconds = float(amount or 0) / (1000 if unit == "ms" else 1)
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + seconds


def _number(text: str | None) -> float | None:
    """A finite, non-negative number of seconds written as `text`, or None."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _http_date(text: str) -> float | None:
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
