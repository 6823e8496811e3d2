"""Both SDKs' exceptions as `ProviderError`: the API's own error type and message, whether
asking again may help (decided as the SDKs' own retry policy decides it, except that quota and
billing failures are final), and how long the response asked to wait first.

Either SDK may be missing (each is an extra): its exceptions are then left out, since nothing
could have raised them. httpx2 is here whichever is installed: both are built on it.
"""

from __future__ import annotations

__all__ = ["map_sdk_error"]

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx2
from turnstile.core import TurnstileError

from ._errors import ProviderError
from ._failures import RETRYABLE, is_final, wait_of
from ._optional import installed

if TYPE_CHECKING:
    import anthropic
    import openai

_SDKS = [sdk for sdk in map(installed, ("anthropic", "openai")) if sdk is not None]


def _classes(name: str) -> tuple[type[Any], ...]:
    """The installed SDKs' exception classes called `name`."""
    return tuple(getattr(sdk, name) for sdk in _SDKS if hasattr(sdk, name))


_TIMEOUTS = (*_classes("APITimeoutError"), httpx2.TimeoutException)
# A connection that drops mid-stream escapes as httpx2's own error from a raw body (as our clients
# read it) and from older Anthropic SDKs; newer ones wrap it as their APIConnectionError.
_CONNECTION = (*_classes("APIConnectionError"), httpx2.NetworkError, httpx2.RemoteProtocolError)
_STATUS = _classes("APIStatusError")
_BODY_UNRELATED = _classes("APIResponseValidationError")
_API = _classes("APIError")
_SDK = _classes("AnthropicError") + _classes("OpenAIError")
_RETRY_ASKED = _classes("RetryableError")
_STATUS_KINDS = {529: "overloaded"}


def map_sdk_error(exc: BaseException) -> ProviderError | None:
    """The `ProviderError` for an exception an SDK call raised, or None if it is not the SDK's.

    Timeouts, connection failures, 408, 409, 429 and 5xx (529 overloaded included) are retryable;
    other statuses (400, 401, 403, 404, 422, ...) are not; an `x-should-retry: true|false` response
    header overrides both, as it does in the SDKs; a quota or billing failure is final whatever
    they say (`_failures.FINAL`: `insufficient_quota` comes as a 429). `kind` is the body's
    `error.code` or `error.type` (`rate_limit_exceeded`, `overloaded_error`), else the status
    name. `retry_after` is what the response headers ask for (`_failures.wait_of`), or a
    retryable error's message.
    """
    if isinstance(exc, TurnstileError):
        return None
    if isinstance(exc, _TIMEOUTS):
        return ProviderError("timeout", _with_cause(exc), retryable=True)
    if isinstance(exc, _CONNECTION):
        return ProviderError("connection_error", _with_cause(exc), retryable=True)
    if isinstance(exc, _STATUS):
        return _from_error_body(exc, exc.status_code, exc.response.headers)
    if isinstance(exc, _API) and not isinstance(exc, _BODY_UNRELATED):
        return _from_error_body(exc, None, None)
    if isinstance(exc, _SDK):
        retryable = isinstance(exc, _RETRY_ASKED)
        return ProviderError(_snake(type(exc).__name__), str(exc), retryable=retryable)
    return None


def _from_error_body(
    exc: anthropic.APIError | openai.APIError, status: int | None, headers: httpx2.Headers | None
) -> ProviderError:
    error = _error_object(exc.body)
    kind = _first_text(error, "code", "type") or _status_kind(status)
    said = _first_text(error, "message") or exc.message
    retryable = not is_final(error) and _retryable(kind, status, headers)
    wait = wait_of(headers, said if retryable else "")
    notes = [f"HTTP {status}"] if status is not None and status >= 400 else []
    if request_id := getattr(exc, "request_id", None):
        notes.append(f"request {request_id}")
    message = f"{said} ({', '.join(notes)})" if notes else said
    return ProviderError(kind, message, retryable=retryable, retry_after=wait, status=status)


def _retryable(kind: str, status: int | None, headers: httpx2.Headers | None) -> bool:
    should_retry = headers.get("x-should-retry") if headers is not None else None
    if status is not None and status >= 400:
        if should_retry in ("true", "false"):
            return should_retry == "true"
        return status in (408, 409, 429) or status >= 500
    return kind in RETRYABLE  # no HTTP status says it: an error event in a stream


def _error_object(body: object) -> Mapping[str, Any]:
    """Anthropic's errors keep the whole body (`{"type": "error", "error": {...}}`); OpenAI's
    keep only the inner object."""
    if not isinstance(body, Mapping):
        return {}
    inner = body.get("error")
    return inner if isinstance(inner, Mapping) else body


def _first_text(error: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = error.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _status_kind(status: int | None) -> str:
    if status is None:
        return "api_error"
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    try:
        return httpx2.codes(status).name.lower()
    except ValueError:
        return f"http_{status}"


def _with_cause(exc: BaseException) -> str:
    cause = exc.__cause__
    return f"{exc} ({type(cause).__name__}: {cause})" if cause is not None else str(exc)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
