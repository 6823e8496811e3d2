"""The three `Client`s over the official SDKs, through the replay transport: sync and async (trio
and asyncio), plain and streamed; every failure ends as a `ProviderError` the loop can act on."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx2
import msgspec
import openai
import pytest
import trio
from turnstile.core import CallModel, Guards, Loop, LoopSpec, ModelFailed, ModelRequest, StopReason
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage, UserMessage
from turnstile.core.request import CachePolicy
from turnstile.executors import sync
from turnstile.executors.testing import replay
from turnstile.providers import (
    ArgumentsDelta,
    Delta,
    ProviderError,
    TextDelta,
    WireCache,
    anthropic_messages,
    openai_chat,
    openai_responses,
)
from turnstile.providers.replay import (
    ReplayMismatch,
    Trace,
    client_for,
    load_trace,
    prompt_for,
    spec_for,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FORMATS: dict[str, ModuleType] = {
    "anthropic": anthropic_messages,
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
}
PATHS = {
    "anthropic": "/v1/messages",
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}
PROVIDERS = sorted(FORMATS)
PROMPT = "北京和上海哪个更暖和?"
SPEC = LoopSpec(max_tokens=1024, cache=CachePolicy(enabled=False))  # as `REQUEST` is
REQUEST = ModelRequest(None, [UserMessage(PROMPT)], [], 1024)


def first_request(trace: Trace) -> ModelRequest:
    """The trace's first request as its loop asks it (caching and the rest of its policy)."""
    (command,) = Loop(spec_for(trace)).start(prompt_for(trace), 0.0)
    assert type(command) is CallModel
    return command.request


def complete(client: Any, request: ModelRequest, mode: str) -> ModelResponse:
    if mode == "sync":
        return client.complete(request)
    if mode == "trio":
        return trio.run(client.acomplete, request)
    return asyncio.run(client.acomplete(request))


def check_weather_turn(response: ModelResponse) -> None:
    assert response.stop is ModelStop.tool_use
    assert response.usage == Usage(512, 121)
    text, *calls = response.content
    assert text == Text("我来帮您查询北京和上海的实时天气。")
    assert [(type(c), c.name, c.arguments) for c in calls] == [  # type: ignore[union-attr]
        (ToolCall, "get_weather", {"city": "北京"}),
        (ToolCall, "get_weather", {"city": "上海"}),
    ]


# -- replies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "trio", "asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_plain_reply_decodes(provider: str, mode: str) -> None:
    trace = load_trace(FIXTURES / provider / "weather.json")
    client = client_for(trace, sync=mode == "sync")
    response = complete(client, first_request(trace), mode)
    check_weather_turn(response)
    assert response == FORMATS[provider].decode(trace.exchanges[0].response.body)


@pytest.mark.parametrize("mode", ["sync", "trio", "asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_reply_decodes_and_delivers_its_deltas(provider: str, mode: str) -> None:
    trace = load_trace(FIXTURES / provider / "weather.stream.json")
    sdk = client_for(trace, sync=mode == "sync").sdk
    deltas: list[Delta] = []
    client = FORMATS[provider].Client(
        sdk, model=trace.loop["model"], stream=True, on_delta=deltas.append
    )
    response = complete(client, first_request(trace), mode)
    check_weather_turn(response)
    assert len(deltas) > 3
    text = "".join(d.text for d in deltas if type(d) is TextDelta and d.index == 0)
    assert text == "我来帮您查询北京和上海的实时天气。"
    for index, call in enumerate(response.content[1:], 1):
        assert isinstance(call, ToolCall)
        fragments = [d for d in deltas if type(d) is ArgumentsDelta and d.index == index]
        assert {(d.call_id, d.name) for d in fragments} == {(call.id, "get_weather")}
        assert json.loads("".join(d.fragment for d in fragments)) == call.arguments


def reply(status: int, body: Any, content_type: str = "application/json") -> dict[str, Any]:
    return {"status": status, "headers": {"content-type": content_type}, "body": body}


def scripted(
    provider: str, *replies: dict[str, Any], stream: bool = False, sync: bool = True
) -> Any:
    """A client whose requests (each the encoded `REQUEST`) get `replies`, in order."""
    sent = FORMATS[provider].encode(REQUEST, model="m", **({"stream": True} if stream else {}))
    exchanges = [
        {"request": {"method": "POST", "path": PATHS[provider], "body": sent}, "response": r}
        for r in replies
    ]
    loop = {"model": "m", "prompt": PROMPT, "max_tokens": 1024, "stream": stream}
    trace = msgspec.convert(
        {"provider": provider, "hand_written": True, "loop": loop, "exchanges": exchanges}, Trace
    )
    return client_for(trace, sync=sync)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_json_reply_to_a_streamed_request_is_decoded(provider: str) -> None:
    """Some compatible servers ignore `stream` and answer with a plain body."""
    body = load_trace(FIXTURES / provider / "weather.json").exchanges[0].response.body
    client = scripted(provider, reply(200, body), stream=True)
    assert client.stream
    check_weather_turn(client.complete(REQUEST))


def sse(*events: dict[str, Any]) -> dict[str, Any]:
    """A 200 event stream of `events` (Anthropic's named by their type), as a `reply`."""
    text = "".join(
        (f"event: {e['type']}\n" if "type" in e else "") + f"data: {json.dumps(e)}\n\n"
        for e in events
    )
    return {"status": 200, "headers": {"content-type": "text/event-stream"}, "sse": text}


ANSWER_START = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "stop_reason": None,
    "usage": {"input_tokens": 20, "output_tokens": 8},
}
CHAT_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
CHAT_MORE = {"index": 0, "function": {"arguments": ""}}
RESPONSES_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "f",
    "arguments": "",
    "status": "completed",
}
RESPONSE = {"id": "resp_1", "status": "completed", "output": [RESPONSES_CALL]}
SERVER_CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_fetch", "input": {}}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
NO_ARGUMENTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # a body, and it streamed
    "anthropic": (
        {**ANSWER_START, "content": [SERVER_CALL, CALL], "stop_reason": "tool_use"},
        sse(
            {"type": "message_start", "message": {**ANSWER_START, "content": []}},
            *(
                event
                for i, block in enumerate((SERVER_CALL, CALL))
                for event in (
                    {"type": "content_block_start", "index": i, "content_block": block},
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": ""},
                    },
                    {"type": "content_block_stop", "index": i},
                )
            ),
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
            {"type": "message_stop"},
        ),
    ),
    "openai-chat": (
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "tool_calls": [CHAT_CALL]},
                    "finish_reason": "tool_calls",
                }
            ]
        },
        sse(
            {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **CHAT_CALL}]}}]},
            {"choices": [{"index": 0, "delta": {"tool_calls": [CHAT_MORE]}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ),
    ),
    "openai-responses": (
        RESPONSE,
        sse(
            {"type": "response.output_item.added", "output_index": 0, "item": RESPONSES_CALL},
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 0,
                "delta": "",
            },
            {"type": "response.output_item.done", "output_index": 0, "item": RESPONSES_CALL},
            {"type": "response.completed", "response": RESPONSE},
        ),
    ),
}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_streamed_tool_call_with_no_arguments_decodes_as_empty_input(provider: str) -> None:
    """A call whose only arguments delta is empty reads as the body that says `{}` (or `""`)."""
    body, streamed = NO_ARGUMENTS[provider]
    whole = FORMATS[provider].decode(copy.deepcopy(body))
    assert [p.arguments for p in whole.content if type(p) is ToolCall] == [{}]
    assert scripted(provider, streamed, stream=True).complete(REQUEST) == whole


# -- failures --------------------------------------------------------------------------------


def anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_error(kind: str, message: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


ERRORS = [
    ("anthropic", 529, anthropic_error("overloaded_error", "Overloaded"), True),
    ("anthropic", 429, anthropic_error("rate_limit_error", "Number of requests exceeded"), True),
    ("anthropic", 500, anthropic_error("api_error", "Internal server error"), True),
    ("anthropic", 400, anthropic_error("invalid_request_error", "max_tokens: too large"), False),
    ("anthropic", 401, anthropic_error("authentication_error", "invalid x-api-key"), False),
    ("openai-chat", 503, openai_error("server_error", "The engine is currently overloaded"), True),
    (
        "openai-chat",
        429,
        openai_error("requests", "Rate limit reached for requests", "rate_limit_exceeded"),
        True,
    ),
    ("openai-responses", 500, openai_error("server_error", "The server had an error"), True),
    (
        "openai-responses",
        400,
        openai_error("invalid_request_error", "Invalid 'input[0].content'"),
        False,
    ),
    (
        "openai-chat",
        401,
        openai_error("invalid_request_error", "Incorrect API key provided", "invalid_api_key"),
        False,
    ),
]


@pytest.mark.parametrize(("provider", "status", "body", "retryable"), ERRORS)
def test_http_errors_become_provider_errors(
    provider: str, status: int, body: dict[str, Any], retryable: bool
) -> None:
    with pytest.raises(ProviderError) as info:
        scripted(provider, reply(status, body)).complete(REQUEST)
    error = info.value
    assert error.retryable is retryable
    assert body["error"]["message"] in str(error) and f"HTTP {status}" in str(error)


ANSWER = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "上海更暖和。"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 20, "output_tokens": 8},
}


def test_a_retryable_http_error_is_retried_by_the_loop() -> None:
    overloaded = reply(529, anthropic_error("overloaded_error", "Overloaded"))
    run = sync.run(SPEC, PROMPT, model=scripted("anthropic", overloaded, reply(200, ANSWER)))
    failed = [e for e in run.state.events if type(e) is ModelFailed]
    assert [(f.command_id, f.retryable) for f in failed] == [("model-1", True)]
    assert (run.stop_reason, run.output) == (StopReason.completed, "上海更暖和。")


@pytest.mark.parametrize("mode", ["trio", "asyncio"])
def test_async_calls_fail_the_same_way(mode: str) -> None:
    overloaded = reply(529, anthropic_error("overloaded_error", "Overloaded"))
    with pytest.raises(ProviderError, match="overloaded_error: Overloaded") as info:
        complete(scripted("anthropic", overloaded, sync=False), REQUEST, mode)
    assert info.value.retryable
    with pytest.raises(ProviderError, match="malformed_response") as info:
        complete(scripted("openai-chat", reply(200, {"choices": []}), sync=False), REQUEST, mode)
    assert not info.value.retryable
    trace = load_trace(FIXTURES / "openai-responses/overloaded.stream.json")
    with pytest.raises(ProviderError, match="server_is_overloaded") as info:
        complete(client_for(trace, sync=False), first_request(trace), mode)
    assert info.value.retryable


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_error_mid_stream_is_retryable_and_the_loop_retries(provider: str) -> None:
    trace = load_trace(FIXTURES / provider / "overloaded.stream.json")
    with pytest.raises(ProviderError) as info:
        client_for(trace).complete(first_request(trace))
    assert info.value.retryable
    run = replay(trace)
    failed = [e for e in run.state.events if type(e) is ModelFailed]
    assert [(f.command_id, f.retryable) for f in failed] == [("model-1", True)]
    assert run.stop_reason is StopReason.completed


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stream_that_ends_early_is_retryable(provider: str) -> None:
    trace = load_trace(FIXTURES / provider / "weather.stream.json")
    exchange = trace.exchanges[0]
    sse = exchange.response.sse
    assert sse is not None
    cut = msgspec.structs.replace(exchange.response, sse=sse[: len(sse) // 2])
    trace.exchanges[0] = msgspec.structs.replace(exchange, response=cut)
    with pytest.raises(ProviderError) as info:
        client_for(trace).complete(first_request(trace))
    assert (info.value.kind, info.value.retryable) == ("incomplete_stream", True)


MALFORMED = [
    ("anthropic", {"id": "msg_1", "type": "message", "content": "北京", "stop_reason": "end_turn"}),
    ("openai-chat", {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}),
    ("openai-responses", {"id": "resp_1", "object": "response", "status": "completed"}),
]


@pytest.mark.parametrize(("provider", "body"), MALFORMED)
def test_a_malformed_body_is_a_final_error_and_the_run_ends_with_model_error(
    provider: str, body: dict[str, Any]
) -> None:
    with pytest.raises(ProviderError) as info:
        scripted(provider, reply(200, body)).complete(REQUEST)
    assert (info.value.kind, info.value.retryable) == ("malformed_response", False)
    run = sync.run(SPEC, PROMPT, model=scripted(provider, reply(200, body)))
    assert run.stop_reason is StopReason.model_error
    [failed] = [e for e in run.state.events if type(e) is ModelFailed]
    assert not failed.retryable and "malformed_response" in failed.message


def test_a_body_that_is_not_json_is_malformed() -> None:
    page = reply(200, "<html><body>upstream says hello</body></html>", "text/html")
    with pytest.raises(ProviderError, match="not JSON: '<html>") as info:
        scripted("openai-chat", page).complete(REQUEST)
    assert not info.value.retryable


def test_an_event_that_is_not_json_is_malformed() -> None:
    broken = {
        "status": 200,
        "headers": {"content-type": "text/event-stream"},
        "sse": "data: {x\n\n",
    }
    with pytest.raises(ProviderError, match=r"events\[0\]\.data: not JSON") as info:
        scripted("openai-chat", broken, stream=True).complete(REQUEST)
    assert (info.value.kind, info.value.retryable) == ("malformed_response", False)


class _Dropped(httpx2.SyncByteStream):
    """An event stream whose connection drops after its first bytes."""

    def __iter__(self) -> Iterator[bytes]:
        yield b'event: message_start\ndata: {"type": "message_start", '
        raise httpx2.RemoteProtocolError("peer closed connection without sending complete body")


def _offline(sdk_class: Callable[..., Any], handler: Callable[[httpx2.Request], Any]) -> Any:
    http = httpx2.Client(transport=httpx2.MockTransport(handler), trust_env=False)
    return sdk_class(
        api_key="k", base_url="https://offline.invalid", http_client=http, max_retries=0
    )


def _refuse(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


def _drop(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_Dropped())


@pytest.mark.parametrize(
    "make",
    [
        lambda: anthropic_messages.Client(_offline(anthropic.Anthropic, _refuse)),
        lambda: openai_responses.Client(_offline(openai.OpenAI, _refuse)),
        lambda: anthropic_messages.Client(_offline(anthropic.Anthropic, _drop), stream=True),
    ],
    ids=["refused", "refused", "dropped mid-stream"],
)
def test_connection_failures_are_retryable(make: Callable[[], Any]) -> None:
    client = make()
    request = ModelRequest(None, [UserMessage("hi")], [], 16)
    with pytest.raises(ProviderError) as info:
        client.complete(request)
    assert (info.value.kind, info.value.retryable) == ("connection_error", True)


# -- retries: the loop's, not the SDK's ------------------------------------------------------

SDKS = {
    "anthropic": (anthropic.Anthropic, anthropic.AsyncAnthropic),
    "openai-chat": (openai.OpenAI, openai.AsyncOpenAI),
    "openai-responses": (openai.OpenAI, openai.AsyncOpenAI),
}
QUOTA = {
    "anthropic": {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "You have reached your specified workspace API usage limits.",
            "details": {"error_code": "workspace_spend_limit_reached"},
        },
    },
    "openai-chat": openai_error(
        "insufficient_quota", "You exceeded your quota.", "insufficient_quota"
    ),
    "openai-responses": openai_error(
        "insufficient_quota", "You exceeded your quota.", "insufficient_quota"
    ),
}
SERVER_ERROR = {
    "anthropic": anthropic_error("api_error", "Internal server error"),
    "openai-chat": openai_error("server_error", "The server had an error"),
    "openai-responses": openai_error("server_error", "The server had an error"),
}


def counted(
    provider: str, *replies: tuple[int, dict[str, Any]], sync: bool = True, **options: Any
) -> tuple[Any, list[httpx2.Request]]:
    """A `Client` over an SDK client left at its default retries (2), whose transport answers
    with `replies` in turn (the last one again and again, asking for a 1 ms wait) and keeps every
    request that reaches it."""
    sent: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        status, body = replies[min(len(sent), len(replies)) - 1]
        return httpx2.Response(status, json=body, headers={"retry-after-ms": "1"})

    transport = httpx2.MockTransport(answer)
    http = httpx2.Client(transport=transport) if sync else httpx2.AsyncClient(transport=transport)
    sdk = SDKS[provider][0 if sync else 1](
        api_key="k", base_url="https://offline.invalid", http_client=http
    )
    return FORMATS[provider].Client(sdk, model="m", **options), sent


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("failure", "retryable"), [(QUOTA, False), (SERVER_ERROR, True)])
def test_a_model_call_is_one_request_whatever_the_sdk_would_retry(
    provider: str, mode: str, failure: dict[str, Any], retryable: bool
) -> None:
    """A quota failure is final however it comes, and a 500 is the loop's to retry, after the
    wait the response asked for: the SDK sends neither again."""
    status = 429 if failure is QUOTA else 500
    client, sent = counted(provider, (status, failure[provider]), sync=mode == "sync")
    with pytest.raises(ProviderError) as raised:
        complete(client, REQUEST, mode)
    assert (len(sent), raised.value.retryable) == (1, retryable)
    assert raised.value.retry_after == 0.001  # the wait asked for, which the loop keeps


@pytest.mark.parametrize(
    ("failure", "stop", "requests"),
    [(QUOTA, StopReason.model_error, 1), (SERVER_ERROR, StopReason.completed, 2)],
)
def test_the_loop_alone_retries_a_failed_model_call(
    failure: dict[str, Any], stop: StopReason, requests: int
) -> None:
    status = 429 if failure is QUOTA else 500
    client, sent = counted("anthropic", (status, failure["anthropic"]), (200, ANSWER))
    spec = msgspec.structs.replace(SPEC, guards=Guards(retry_backoff_s=0))
    run = sync.run(spec, PROMPT, model=client)
    assert (run.stop_reason, len(sent)) == (stop, requests)
    calls = [e for e in run.state.events if type(e) is ModelFailed]
    assert [f.retryable for f in calls] == [failure is SERVER_ERROR]


def test_sdk_retries_true_leaves_the_sdk_its_own_retries() -> None:
    client, sent = counted("openai-chat", (500, SERVER_ERROR["openai-chat"]), sdk_retries=True)
    with pytest.raises(ProviderError):
        client.complete(REQUEST)
    assert len(sent) == 3  # the first try and the SDK's default 2 retries


# -- what the client refuses -----------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_changed_request_is_a_replay_mismatch_not_a_provider_error(provider: str) -> None:
    trace = load_trace(FIXTURES / provider / "weather.json")
    request = first_request(trace)
    changed = ModelRequest(request.system, [UserMessage("换个问题")], request.tools, 1024)
    with pytest.raises(ReplayMismatch, match="换个问题"):
        client_for(trace).complete(changed)


def test_sync_and_async_are_not_interchangeable() -> None:
    trace = load_trace(FIXTURES / "openai-chat/weather.json")
    request = first_request(trace)
    with pytest.raises(
        TypeError, match=r"wraps an async AsyncOpenAI: use `await client\.acomplete"
    ):
        client_for(trace, sync=False).complete(request)
    with pytest.raises(TypeError, match=r"wraps a sync OpenAI: use `client\.complete"):
        trio.run(client_for(trace).acomplete, request)


def test_a_client_takes_only_its_own_providers_sdk() -> None:
    openai_sdk = client_for(load_trace(FIXTURES / "openai-chat/weather.json")).sdk
    with pytest.raises(
        TypeError, match=r"anthropic_messages\.Client needs an anthropic SDK client"
    ):
        anthropic_messages.Client(openai_sdk)
    with pytest.raises(TypeError, match=r"openai_chat\.Client needs an openai SDK client"):
        openai_chat.Client(object())


def test_a_client_says_in_plain_words_whether_its_sdk_client_is_sync_or_async() -> None:
    trace = load_trace(FIXTURES / "openai-chat/weather.json")
    responses = openai_responses.Client(client_for(trace).sdk)
    assert repr(responses) == "<openai_responses.Client 'gpt-5.1' over a sync OpenAI>"
    chat = openai_chat.Client(client_for(trace, sync=False).sdk, model="m")
    assert repr(chat) == "<openai_chat.Client 'm' over an async AsyncOpenAI>"


def test_each_client_owns_its_encoding_cache_unless_given_one() -> None:
    sdk = client_for(load_trace(FIXTURES / "openai-chat/weather.json")).sdk
    one, two = openai_chat.Client(sdk), openai_responses.Client(sdk)
    assert type(one.cache) is WireCache and one.cache is not two.cache
    shared = WireCache()
    assert openai_chat.Client(sdk, cache=shared).cache is shared


def test_on_delta_needs_a_stream() -> None:
    sdk = client_for(load_trace(FIXTURES / "anthropic/weather.json")).sdk
    with pytest.raises(ValueError, match="on_delta needs stream=True"):
        anthropic_messages.Client(sdk, on_delta=print)
    assert anthropic_messages.Client(sdk).model == "claude-sonnet-4-6"


def test_an_exception_in_on_delta_ends_the_call_unchanged() -> None:
    trace = load_trace(FIXTURES / "openai-responses/weather.stream.json")

    def stop(delta: Delta) -> None:
        raise LookupError("the UI went away")

    client = openai_responses.Client(client_for(trace).sdk, stream=True, on_delta=stop)
    with pytest.raises(LookupError, match="the UI went away"):
        client.complete(first_request(trace))
