"""What the three codecs share, seen through each of them: one rule for reading fields, one list
of the error kinds worth retrying."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic as anthropic_sdk
import httpx2
import msgspec
import openai
import pytest
from turnstile.core.messages import ModelResponse, ToolCall
from turnstile.providers import DecodeError, ProviderError
from turnstile.providers import anthropic_messages as anthropic
from turnstile.providers import openai_chat as chat
from turnstile.providers import openai_responses as responses
from turnstile.providers._sdk import map_sdk_error


def anthropic_body(stop: Any = "end_turn", tokens: Any = 1) -> dict[str, Any]:
    usage = {"input_tokens": tokens, "output_tokens": 1}
    return {"type": "message", "content": [], "stop_reason": stop, "usage": usage}


def chat_body(stop: Any = "stop", tokens: Any = 1) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": stop}
    return {"choices": [choice], "usage": {"prompt_tokens": tokens, "completion_tokens": 1}}


def responses_body(stop: Any = "completed", tokens: Any = 1) -> dict[str, Any]:
    return {"status": stop, "output": [], "usage": {"input_tokens": tokens, "output_tokens": 1}}


FORMATS: dict[str, tuple[Callable[[Any], ModelResponse], Callable[..., dict[str, Any]], str]] = {
    # decode, a body, and the path of its stop reason
    "anthropic": (anthropic.decode, anthropic_body, "stop_reason"),
    "openai-chat": (chat.decode, chat_body, "choices[0].finish_reason"),
    "openai-responses": (responses.decode, responses_body, "status"),
}
TOKENS = {"anthropic": "input_tokens", "openai-chat": "prompt_tokens"}


def decode_error(name: str, body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(DecodeError) as raised:
        FORMATS[name][0](body)
    return raised.value.path, raised.value.message


def without(body: dict[str, Any], path: str) -> dict[str, Any]:
    *parents, key = path.replace("[0]", ".0").split(".")
    inner: Any = body
    for part in parents:
        inner = inner[int(part)] if part.isdigit() else inner[part]
    del inner[key]
    return body


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_reads_fields_by_one_rule(name: str) -> None:
    _, body, stop = FORMATS[name]
    assert decode_error(name, without(body(), stop)) == (stop, "missing")
    assert decode_error(name, body(stop=None)) == (stop, "expected a string, got null")
    tokens = f"usage.{TOKENS.get(name, 'input_tokens')}"
    assert decode_error(name, body(tokens="12")) == (tokens, 'expected an integer, got "12"')
    assert decode_error(name, body(tokens=True)) == (tokens, "expected an integer, got true")
    path, message = decode_error(name, [body()])  # type: ignore[arg-type]
    assert (path, message[:26]) == ("", "expected an object, got [{")


def error_body(name: str, kind: str) -> dict[str, Any]:
    if name == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": "m"}}
    if name == "openai-chat":
        return {"error": {"type": "error", "code": kind, "message": "m"}}
    return {"status": "failed", "error": {"code": kind, "message": "m"}}


RETRYABLE = [
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
    "server_error",
    "rate_limit_exceeded",
    "server_is_overloaded",
    "service_unavailable_error",
    "vector_store_timeout",
]
FINAL = ["invalid_request_error", "insufficient_quota", "invalid_prompt", "billing_error"]


@pytest.mark.parametrize("kind", RETRYABLE + FINAL)
@pytest.mark.parametrize("name", FORMATS)
def test_every_format_retries_the_same_error_kinds(name: str, kind: str) -> None:
    with pytest.raises(ProviderError) as raised:
        FORMATS[name][0](error_body(name, kind))
    assert (raised.value.kind, raised.value.retryable) == (kind, kind in RETRYABLE)


@pytest.mark.parametrize("kind", RETRYABLE + FINAL)
def test_an_sdk_error_without_a_status_retries_the_same_kinds(kind: str) -> None:
    request = httpx2.Request("POST", "https://api.example.invalid/v1/responses")
    error = map_sdk_error(openai.APIError("An error occurred", request, body={"code": kind}))
    assert error is not None
    assert (error.kind, error.retryable) == (kind, kind in RETRYABLE)


# -- arguments text: one rule for a call the reply's end cut off -----------------------------------


def anthropic_call(text: str, cut: bool) -> ToolCall:
    """The call in a streamed reply, the only form in which Anthropic's arguments are text."""
    start = {"type": "message", "role": "assistant", "content": [], "stop_reason": None}
    call = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}
    events = [
        {"type": "message_start", "message": {**start, "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": call},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": text},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens" if cut else "tool_use"},
            "usage": {"output_tokens": 1},
        },
        {"type": "message_stop"},
    ]
    accumulator = anthropic.StreamAccumulator()
    for event in events:
        accumulator.feed(event)
    return accumulator.result().content[0]  # type: ignore[return-value]


def chat_call(text: str, cut: bool) -> ToolCall:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": text},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "length" if cut else "tool_calls"}
    return chat.decode({"choices": [choice]}).content[0]  # type: ignore[return-value]


def responses_call(text: str, cut: bool) -> ToolCall:
    status = "incomplete" if cut else "completed"
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather"}
    body = {
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": [{**call, "arguments": text, "status": status}],
    }
    reply = responses.decode(body).content[0]
    assert type(reply) is ToolCall and reply.provider_data == {"id": "fc_1", "arguments": text}
    return msgspec.structs.replace(reply, provider_data=None)


CALLS = {"anthropic": anthropic_call, "openai-chat": chat_call, "openai-responses": responses_call}


@pytest.mark.parametrize(
    ("text", "salvaged"),
    [
        ('{"city": "上海", "unit": "cel', {"city": "上海"}),
        ('{"city": "上海", "days": [1, 2', {"city": "上海"}),
        ('{"city": "上', {}),
        ('["上海"', {}),
        ("", {}),
        # salvaged members follow the rule whole arguments do: NaN is not JSON
        ('{"days": NaN, "city": "上', {}),
        ('{"city": "上海", "days": NaN, "unit": "c', {}),
    ],
)
@pytest.mark.parametrize("name", CALLS)
def test_a_call_cut_off_reads_alike_in_every_format(
    name: str, text: str, salvaged: dict[str, Any]
) -> None:
    call = CALLS[name](text, True)
    assert call == ToolCall("call_1", "get_weather", salvaged, raw_arguments=text, complete=False)


@pytest.mark.parametrize(
    ("text", "arguments", "raw"),
    [
        ('{"city": "上海"}', {"city": "上海"}, None),
        ('{"city": "上', {}, '{"city": "上'),
        ("", {}, None),
    ],
)
@pytest.mark.parametrize("name", CALLS)
def test_a_finished_call_reads_alike_in_every_format(
    name: str, text: str, arguments: dict[str, Any], raw: str | None
) -> None:
    call = CALLS[name](text, False)
    assert call == ToolCall("call_1", "get_weather", arguments, raw_arguments=raw)


# -- quota and billing: final every way they come in ----------------------------------------------

REQUEST = httpx2.Request("POST", "https://api.example.invalid/v1/responses")


def status_error(sdk: Any, status: int, body: dict[str, Any], **headers: str) -> Exception:
    response = httpx2.Response(status, json=body, headers=headers, request=REQUEST)
    inner = body if sdk is anthropic_sdk else body["error"]
    return sdk.APIStatusError(f"Error code: {status}", response=response, body=inner)


QUOTA = {"message": "You exceeded your current quota", "type": "insufficient_quota"}
SPENT = {
    "type": "rate_limit_error",
    "message": "This request would exceed your account's monthly spend limit.",
    "details": {"error_code": "enforced_spend_limit_reached"},
}


def ways_in() -> list[tuple[str, Callable[[], object]]]:
    """Each way a quota or billing failure reaches turnstile, as the API sends it."""
    responses_event = {"type": "error", "code": "insufficient_quota", "message": "quota"}
    failed = {"type": "response.failed", "response": responses_body("failed")}
    failed["response"]["error"] = {"code": "insufficient_quota", "message": "quota"}
    anthropic_event = {"type": "error", "error": SPENT}
    return [
        (
            "openai 429",
            lambda: status_error(openai, 429, {"error": {**QUOTA, "code": "insufficient_quota"}}),
        ),
        (
            "openai 429 that says retry",
            lambda: status_error(
                openai,
                429,
                {"error": {**QUOTA, "code": "insufficient_quota"}},
                **{"x-should-retry": "true"},
            ),
        ),
        (
            "openai billing 400",
            lambda: status_error(
                openai,
                400,
                {
                    "error": {
                        "message": "m",
                        "type": "invalid_request_error",
                        "code": "billing_hard_limit_reached",
                    }
                },
            ),
        ),
        (
            "anthropic 429 spend limit",
            lambda: status_error(anthropic_sdk, 429, {"type": "error", "error": SPENT}),
        ),
        (
            "anthropic 402",
            lambda: status_error(
                anthropic_sdk,
                402,
                {"type": "error", "error": {"type": "billing_error", "message": "m"}},
            ),
        ),
        ("responses error event", lambda: responses.StreamAccumulator().feed(responses_event)),
        ("responses failed", lambda: responses.StreamAccumulator().feed(failed)),
        (
            "chat error chunk",
            lambda: chat.StreamAccumulator().feed(
                {"error": {**QUOTA, "code": "insufficient_quota"}}
            ),
        ),
        ("anthropic error event", lambda: anthropic.StreamAccumulator().feed(anthropic_event)),
        (
            "chat error body",
            lambda: chat.decode({"error": {**QUOTA, "code": "insufficient_quota"}}),
        ),
    ]


@pytest.mark.parametrize(("way", "make"), ways_in(), ids=[w for w, _ in ways_in()])
def test_quota_and_billing_failures_are_final_every_way_they_come(
    way: str, make: Callable[[], object]
) -> None:
    try:
        made = make()
    except ProviderError as raised:
        error = raised
    else:
        mapped = map_sdk_error(made)  # type: ignore[arg-type]
        assert mapped is not None
        error = mapped
    assert error.retryable is False, way


def test_calls_sharing_an_id_reach_the_loop_which_answers_the_repeat() -> None:
    """The codec keeps what the model said; the loop gives the repeat an id and an error."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    body = {
        "content": [call, {**call, "input": {"city": "上海"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    reply = anthropic.decode(body)
    assert [p.id for p in reply.content if type(p) is ToolCall] == ["toolu_1", "toolu_1"]
