import email.utils
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from turnstile.core import Guards, LoopSpec, ModelError, ModelFailed
from turnstile.executors import sync
from turnstile.providers import anthropic_messages, openai_chat, openai_responses
from turnstile.providers._errors import ProviderError
from turnstile.providers._offline import replay_client
from turnstile.providers._sdk import map_sdk_error
from turnstile.providers._transport import (
    Exchange,
    RecordedRequest,
    RecordedResponse,
    ReplayMismatch,
    Trace,
)

CLIENTS = {
    "anthropic": anthropic_messages.Client,
    "openai-chat": openai_chat.Client,
    "openai-responses": openai_responses.Client,
}
REQUEST = httpx2.Request("POST", "https://api.example.invalid/v1/messages")


def response(status: int, body: Any = None, **headers: str) -> httpx2.Response:
    if isinstance(body, str):
        return httpx2.Response(status, headers=headers, text=body, request=REQUEST)
    return httpx2.Response(status, headers=headers, json=body, request=REQUEST)


def anthropic_error(
    cls: type[anthropic.APIStatusError], status: int, kind: str, message: str, **headers: str
) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_9"}
    return cls(
        f"Error code: {status} - {body}",
        response=response(status, body, **{"request-id": "req_9", **headers}),
        body=body,
    )


def openai_error(
    cls: type[openai.APIStatusError], status: int, error: dict[str, Any], **headers: str
) -> openai.APIStatusError:
    return cls(
        f"Error code: {status} - {error['message']}",
        response=response(status, {"error": error}, **{"x-request-id": "req_o", **headers}),
        body=error,
    )


def mapped(exc: BaseException) -> ProviderError:
    error = map_sdk_error(exc)
    assert isinstance(error, ProviderError)
    assert isinstance(error, ModelError)
    return error


@pytest.mark.parametrize(
    ("cls", "status", "kind", "retryable"),
    [
        (anthropic.RateLimitError, 429, "rate_limit_error", True),
        (anthropic.InternalServerError, 500, "api_error", True),
        (anthropic.ServiceUnavailableError, 503, "api_error", True),
        (anthropic.OverloadedError, 529, "overloaded_error", True),
        (anthropic.RequestTimeoutError, 408, "timeout_error", True),
        (anthropic.ConflictError, 409, "conflict_error", True),
        (anthropic.BadRequestError, 400, "invalid_request_error", False),
        (anthropic.AuthenticationError, 401, "authentication_error", False),
        (anthropic.PermissionDeniedError, 403, "permission_error", False),
        (anthropic.NotFoundError, 404, "not_found_error", False),
        (anthropic.ContentTooLargeError, 413, "request_too_large", False),
        (anthropic.UnprocessableEntityError, 422, "invalid_request_error", False),
    ],
)
def test_anthropic_status_errors(
    cls: type[anthropic.APIStatusError], status: int, kind: str, retryable: bool
) -> None:
    error = mapped(anthropic_error(cls, status, kind, "出错了: details"))
    assert error.kind == kind and error.status == status
    assert error.retryable is retryable
    assert error.message == f"{kind}: 出错了: details (HTTP {status}, request req_9)"


@pytest.mark.parametrize(
    ("cls", "status", "error", "kind", "retryable"),
    [
        (
            openai.RateLimitError,
            429,
            {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"},
            "rate_limit_exceeded",
            True,
        ),
        (
            openai.InternalServerError,
            500,
            {"message": "The server had an error", "type": "server_error", "code": None},
            "server_error",
            True,
        ),
        (
            openai.BadRequestError,
            400,
            {
                "message": "too long",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            },
            "context_length_exceeded",
            False,
        ),
        (
            openai.AuthenticationError,
            401,
            {
                "message": "Incorrect API key",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            },
            "invalid_api_key",
            False,
        ),
        (
            openai.PermissionDeniedError,
            403,
            {"message": "Not allowed", "type": "invalid_request_error", "code": None},
            "invalid_request_error",
            False,
        ),
        (
            openai.NotFoundError,
            404,
            {
                "message": "No such model",
                "type": "invalid_request_error",
                "code": "model_not_found",
            },
            "model_not_found",
            False,
        ),
        (
            openai.UnprocessableEntityError,
            422,
            {"message": "Unprocessable", "type": None, "code": None},
            "unprocessable_content",
            False,
        ),
    ],
)
def test_openai_status_errors(
    cls: type[openai.APIStatusError],
    status: int,
    error: dict[str, Any],
    kind: str,
    retryable: bool,
) -> None:
    result = mapped(openai_error(cls, status, error))
    assert result.kind == kind and result.status == status
    assert result.retryable is retryable
    assert result.message == f"{kind}: {error['message']} (HTTP {status}, request req_o)"


def test_x_should_retry_header_overrides_the_status() -> None:
    overloaded = anthropic_error(
        anthropic.OverloadedError,
        529,
        "overloaded_error",
        "Overloaded",
        **{"x-should-retry": "false"},
    )
    assert mapped(overloaded).retryable is False
    bad = openai_error(
        openai.BadRequestError,
        400,
        {"message": "try again", "type": "invalid_request_error"},
        **{"x-should-retry": "true"},
    )
    assert mapped(bad).retryable is True


def test_status_without_an_error_body_is_named_after_the_status() -> None:
    html = anthropic.ServiceUnavailableError(
        "<html>unavailable</html>", response=response(503, "<html>unavailable</html>"), body=None
    )
    error = mapped(html)
    assert (error.kind, error.retryable) == ("service_unavailable", True)
    assert "<html>unavailable</html> (HTTP 503)" in error.message
    overloaded = anthropic.OverloadedError("Error code: 529", response=response(529), body=None)
    assert (mapped(overloaded).kind, mapped(overloaded).retryable) == ("overloaded", True)
    teapot = openai.APIStatusError("Error code: 418", response=response(418), body=None)
    assert (mapped(teapot).kind, mapped(teapot).retryable) == ("im_a_teapot", False)
    odd = openai.APIStatusError("Error code: 499", response=response(499), body=None)
    assert mapped(odd).kind == "http_499"


def test_error_event_inside_a_stream_uses_the_error_type() -> None:
    ok = httpx2.Response(200, request=REQUEST, headers={"request-id": "req_s"})
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    overloaded = anthropic.APIStatusError(str(body), response=ok, body=body)
    error = mapped(overloaded)
    assert (error.kind, error.retryable) == ("overloaded_error", True)
    assert error.message == "overloaded_error: Overloaded (request req_s)"
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    assert mapped(anthropic.APIStatusError("x", response=ok, body=body)).retryable is False
    server = openai.APIError("An error occurred", REQUEST, body={"type": "server_error"})
    assert (mapped(server).kind, mapped(server).retryable) == ("server_error", True)
    unknown = openai.APIError("An error occurred during streaming", REQUEST, body=None)
    assert mapped(unknown).message == "api_error: An error occurred during streaming"


@pytest.mark.parametrize("sdk", [anthropic, openai])
def test_timeouts_and_connection_failures_are_retryable(sdk: Any) -> None:
    timeout = mapped(sdk.APITimeoutError(request=REQUEST))
    assert (timeout.kind, timeout.retryable) == ("timeout", True)
    try:
        raise sdk.APIConnectionError(request=REQUEST) from httpx2.ConnectError("refused")
    except sdk.APIConnectionError as exc:
        failure = mapped(exc)
    assert (failure.kind, failure.retryable) == ("connection_error", True)
    assert failure.message == "connection_error: Connection error. (ConnectError: refused)"


def test_transport_errors_that_escape_the_sdk_are_retryable() -> None:
    assert mapped(httpx2.ReadTimeout("slow", request=REQUEST)).kind == "timeout"
    dropped = mapped(httpx2.RemoteProtocolError("peer closed connection", request=REQUEST))
    assert (dropped.kind, dropped.retryable) == ("connection_error", True)
    assert map_sdk_error(httpx2.UnsupportedProtocol("ftp", request=REQUEST)) is None


def test_other_sdk_errors_are_not_retryable() -> None:
    invalid = anthropic.APIResponseValidationError(response=response(200, {}), body={"type": "x"})
    assert (mapped(invalid).kind, mapped(invalid).retryable) == (
        "api_response_validation_error",
        False,
    )
    invalid = openai.APIResponseValidationError(response=response(200, {}), body={"type": "x"})
    assert mapped(invalid).kind == "api_response_validation_error"
    assert mapped(openai.OpenAIError("no key")).retryable is False
    again = mapped(anthropic.RetryableError("again"))
    assert (again.kind, again.retryable) == ("retryable_error", True)


def test_exceptions_that_are_not_the_sdks_are_not_mapped() -> None:
    assert map_sdk_error(ValueError("x")) is None
    assert map_sdk_error(KeyboardInterrupt()) is None
    assert map_sdk_error(ProviderError("k", "m", retryable=True)) is None
    assert map_sdk_error(ReplayMismatch(0, "diff")) is None


# Through the real SDK clients, served by the replay transport -------------------------------

ANTHROPIC_BODY = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_BODY = {"model": "m", "input": "hi"}


def one_exchange(provider: str, status: int, body: Any, **headers: str) -> Trace:
    path, request = {
        "anthropic": ("/v1/messages", ANTHROPIC_BODY),
        "openai-chat": ("/v1/chat/completions", CHAT_BODY),
        "openai-responses": ("/v1/responses", RESPONSES_BODY),
    }[provider]
    recorded = RecordedResponse(status=status, headers=headers, body=body)
    return Trace(
        provider=provider,  # type: ignore[arg-type]
        hand_written=True,
        exchanges=[Exchange(RecordedRequest(method="POST", path=path, body=request), recorded)],
    )


def call(provider: str, client: Any, **extra: Any) -> Any:
    if provider == "anthropic":
        return client.messages.create(**ANTHROPIC_BODY, **extra)
    if provider == "openai-chat":
        return client.chat.completions.create(**CHAT_BODY, **extra)
    return client.responses.create(**RESPONSES_BODY, **extra)


def raised_by(provider: str, trace: Trace) -> BaseException:
    client, transport = replay_client(trace)
    with pytest.raises(Exception) as info:
        call(provider, client)
    assert transport.remaining == []
    return info.value


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (529, "overloaded_error", True),
        (429, "rate_limit_error", True),
        (400, "invalid_request_error", False),
        (500, "api_error", True),
    ],
)
def test_anthropic_client_errors_through_replay(status: int, kind: str, retryable: bool) -> None:
    body = {"type": "error", "error": {"type": kind, "message": "来自 API 的消息"}}
    trace = one_exchange("anthropic", status, body, **{"request-id": "req_011"})
    error = mapped(raised_by("anthropic", trace))
    assert (error.kind, error.retryable) == (kind, retryable)
    assert error.message == f"{kind}: 来自 API 的消息 (HTTP {status}, request req_011)"


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses"])
@pytest.mark.parametrize(
    ("status", "error", "kind", "retryable"),
    [
        (
            429,
            {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit_exceeded"},
            "rate_limit_exceeded",
            True,
        ),
        (
            400,
            {"message": "Invalid 'input'", "type": "invalid_request_error", "code": None},
            "invalid_request_error",
            False,
        ),
        (
            500,
            {"message": "The server had an error", "type": "server_error", "code": None},
            "server_error",
            True,
        ),
        (
            529,
            {"message": "Overloaded", "type": None, "code": None},
            "overloaded",
            True,
        ),
    ],
)
def test_openai_client_errors_through_replay(
    provider: str,
    status: int,
    error: dict[str, Any],
    kind: str,
    retryable: bool,
) -> None:
    trace = one_exchange(provider, status, {"error": error}, **{"x-request-id": "req_o"})
    result = mapped(raised_by(provider, trace))
    assert (result.kind, result.retryable) == (kind, retryable)
    assert result.message == f"{kind}: {error['message']} (HTTP {status}, request req_o)"


def test_x_should_retry_through_replay() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    trace = one_exchange("anthropic", 529, body, **{"x-should-retry": "false"})
    assert mapped(raised_by("anthropic", trace)).retryable is False


def test_anthropic_error_event_in_a_stream_through_replay() -> None:
    sse = (
        "event: message_start\n"
        'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":'
        '"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,'
        '"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
        "event: error\n"
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    trace = Trace(
        provider="anthropic",
        hand_written=True,
        exchanges=[
            Exchange(
                RecordedRequest(
                    method="POST", path="/v1/messages", body={**ANTHROPIC_BODY, "stream": True}
                ),
                RecordedResponse(status=200, headers={"request-id": "req_s"}, sse=sse),
            )
        ],
    )
    client, _ = replay_client(trace)
    with pytest.raises(Exception) as info:
        list(call("anthropic", client, stream=True))
    error = mapped(info.value)
    assert (error.kind, error.retryable) == ("overloaded_error", True)
    assert error.message == "overloaded_error: Overloaded (request req_s)"


def test_openai_error_chunk_in_a_chat_stream_through_replay() -> None:
    chunk = {"error": {"message": "The server had an error", "type": "server_error"}}
    trace = Trace(
        provider="openai-chat",
        hand_written=True,
        exchanges=[
            Exchange(
                RecordedRequest(
                    method="POST", path="/v1/chat/completions", body={**CHAT_BODY, "stream": True}
                ),
                RecordedResponse(status=200, sse=f"data: {json.dumps(chunk)}\n\n"),
            )
        ],
    )
    client, _ = replay_client(trace)
    with pytest.raises(Exception) as info:
        list(call("openai-chat", client, stream=True))
    error = mapped(info.value)
    assert (error.kind, error.retryable) == ("server_error", True)
    assert error.message == "server_error: The server had an error"


class DropsMidStream(httpx2.BaseTransport):
    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, stream=self.Stream()
        )

    class Stream(httpx2.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield b": keep-alive\n\n"
            raise httpx2.RemoteProtocolError("peer closed connection without a complete body")


def sdk_over(provider: str, transport: httpx2.BaseTransport, **options: Any) -> Any:
    """The provider's sync SDK client, sending its requests to `transport`."""
    http = httpx2.Client(transport=transport)
    if provider == "anthropic":
        return anthropic.Anthropic(
            api_key="k", base_url="https://x.invalid", http_client=http, **options
        )
    return openai.OpenAI(api_key="k", base_url="https://x.invalid/v1", http_client=http, **options)


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_a_connection_dropped_mid_stream_is_a_retryable_model_failure(provider: str) -> None:
    """Whatever the SDK raises for the drop (httpx2's error, or its own wrapping of it)."""
    client = CLIENTS[provider](sdk_over(provider, DropsMidStream()), model="m", stream=True)
    run = sync.run(LoopSpec(guards=Guards(max_model_retries=0)), "hi", model=client)
    [failed] = [e for e in run.state.events if type(e) is ModelFailed]
    assert (failed.kind, failed.retryable) == ("connection_error", True)
    with pytest.raises(Exception) as raised:  # the SDK's own stream, as a caller may read it
        list(call(provider, sdk_over(provider, DropsMidStream(), max_retries=0), stream=True))
    error = mapped(raised.value)
    assert (error.kind, error.retryable) == ("connection_error", True)


# -- the wait the provider asked for -----------------------------------------------------------


def rate_limited(sdk: Any, **headers: str) -> Exception:
    if sdk is anthropic:
        return anthropic_error(
            anthropic.RateLimitError, 429, "rate_limit_error", "slow down", **headers
        )
    error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
    return openai_error(openai.RateLimitError, 429, error, **headers)


@pytest.mark.parametrize("sdk", [anthropic, openai])
@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "1"}, 1.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "7"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "7"}, 7.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({}, None),
    ],
)
def test_a_status_error_reports_the_wait_its_headers_ask_for(
    sdk: Any, headers: dict[str, str], wait: float | None
) -> None:
    assert mapped(rate_limited(sdk, **headers)).retry_after == wait


def test_a_wait_given_as_an_http_date_counts_from_now() -> None:
    moment = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = mapped(rate_limited(openai, **{"retry-after": moment})).retry_after
    assert wait is not None and 27 <= wait <= 30
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert mapped(rate_limited(anthropic, **{"retry-after": past})).retry_after == 0.0


@pytest.mark.parametrize(
    ("message", "wait"),
    [
        ("Rate limit reached for gpt-4o on tokens per min. Please try again in 1.5s.", 1.5),
        ("Rate limit reached for requests. Please try again in 20ms.", 0.02),
        ("Please try again in 1m30s. Visit https://platform.openai.com", 90.0),
        ("Please try again in 6m0s.", 360.0),
        ("Please try again later.", None),
    ],
)
def test_without_a_header_the_wait_is_read_from_the_message(message: str, wait: float) -> None:
    error = {"message": message, "type": "tokens", "code": "rate_limit_exceeded"}
    assert mapped(openai_error(openai.RateLimitError, 429, error)).retry_after == wait
    event = {"type": "error", "code": "rate_limit_exceeded", "message": message}
    with pytest.raises(ProviderError) as raised:
        openai_responses.StreamAccumulator().feed(event)
    assert raised.value.retry_after == wait
    with pytest.raises(ProviderError) as raised:
        openai_chat.StreamAccumulator().feed({"error": error})
    assert raised.value.retry_after == wait


def test_a_final_error_asks_for_no_wait_from_its_message() -> None:
    error = {"message": "Please try again in 1s", "type": "invalid_request_error", "code": None}
    assert mapped(openai_error(openai.BadRequestError, 400, error)).retry_after is None


@pytest.mark.parametrize("provider", ["anthropic", "openai-chat", "openai-responses"])
def test_a_replayed_429_reports_its_wait_to_the_loop(provider: str) -> None:
    body = (
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
        if provider == "anthropic"
        else {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    )
    trace = one_exchange(provider, 429, body, **{"retry-after": "3"})
    error = mapped(raised_by(provider, trace))
    assert (error.retryable, error.retry_after) == (True, 3.0)
