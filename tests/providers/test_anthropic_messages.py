"""The Anthropic Messages codec: encode, decode, the stream accumulator, and the wire traces."""

from __future__ import annotations

import copy
import itertools
import json
import string
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from turnstile.core import (
    CallModel,
    Finish,
    Guards,
    Loop,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    RunTool,
    StopReason,
    ToolOutcome,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Opaque,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
    text_of,
)
from turnstile.core.messages import Message as CoreMessage
from turnstile.core.request import Purpose
from turnstile.providers._deltas import ArgumentsDelta, TextDelta, ThinkingDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers.anthropic_messages import StreamAccumulator, decode, encode
from turnstile.providers.replay import Trace, prompt_for, spec_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"
MARK = {"type": "ephemeral"}
WEATHER = {
    "北京": '{"温度":26,"天气":"多云","湿度":45}',
    "上海": '{"温度":29,"天气":"晴","湿度":68}',
}


# -- helpers -----------------------------------------------------------------------------------


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The `data:` payloads of an event stream, parsed; checks each `event:` name matches."""
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        fields: dict[str, list[str]] = {}
        for line in frame.split("\n"):
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
        data = json.loads("\n".join(fields["data"]))
        assert fields["event"] == [data["type"]], frame
        events.append(data)
    return events


def to_sse(events: list[dict[str, Any]]) -> str:
    return "".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False, separators=(',', ':'))}\n\n"
        for e in events
    )


def accumulate(events: list[dict[str, Any]]) -> ModelResponse:
    acc = StreamAccumulator()
    for event in events:
        acc.feed(event)
    return acc.result()


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def replay(trace: dict[str, Any]) -> tuple[list[dict[str, Any]], Finish]:
    """Drive the real loop against a trace's recorded responses, as the executor would: encode
    each request, decode (or accumulate) the recorded answer, hand tools their recorded outputs.
    Returns the request bodies the loop sent and how it finished."""
    spec_json = trace["loop"]
    recorded = msgspec.convert(trace, Trace)
    spec = spec_for(recorded)  # the trace's loop section as the replay tools read it
    options = dict(spec_json.get("options", {}))
    if spec_json["stream"]:
        options["stream"] = True
    responses = iter(exchange["response"] for exchange in trace["exchanges"])
    recorded_outputs = {
        call_id: ToolOutcome(
            msgspec.convert(out["content"], str | list[ResultPart]), out.get("is_error", False)
        )
        for call_id, out in spec_json.get("tool_outputs", {}).items()
    }
    loop = Loop(spec)
    now = 0.0
    requests: list[dict[str, Any]] = []
    commands = deque(loop.start(prompt_for(recorded), now))
    while commands:
        now += 1.0
        match commands.popleft():
            case CallModel(id=command_id, request=request):
                # a request naming its model (a fallback) goes to that one, as a Client sends it
                model = request.model or spec_json["model"]
                requests.append(encode(request, model=model, **options))
                response = next(responses)
                try:
                    if response["status"] != 200:  # an HTTP error: the SDK raises, as it says
                        retry = response["headers"].get("x-should-retry") == "true"
                        raise ProviderError("overloaded_error", "HTTP error", retryable=retry)
                    if "sse" in response:
                        reply = accumulate(parse_sse(response["sse"]))
                    else:
                        reply = decode(response["body"])
                except ProviderError as e:
                    obs: Any = ModelFailed(
                        now=now, command_id=command_id, message=str(e), retryable=e.retryable
                    )
                else:
                    obs = ModelReplied(now=now, command_id=command_id, response=reply)
                commands.extend(loop.send(obs))
            case RunTool(id=call_id):
                out = recorded_outputs[call_id]
                commands.extend(
                    loop.send(
                        ToolReturned(
                            now=now, call_id=call_id, content=out.content, is_error=out.is_error
                        )
                    )
                )
            case Finish() as finish:
                assert next(responses, None) is None, "the loop finished before the trace did"
                return requests, finish
    raise AssertionError("the loop stopped without a Finish")


ID = "msg_01XFDUDYJgAACzvnptvVoYEL"


def message(content: list[dict[str, Any]], stop: Any = "end_turn", **usage: Any) -> dict[str, Any]:
    """A response body as the API sends it."""
    return {
        "id": ID,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def tool_use(call_id: str = "toolu_01A09q90qw90lq917835lq9", value: Any = ...) -> dict[str, Any]:
    arguments = {"city": "北京"} if value is ... else value
    return {"type": "tool_use", "id": call_id, "name": "get_weather", "input": arguments}


def stream_of(body: dict[str, Any], fragments: dict[int, list[str]] | None = None) -> list[dict]:
    """The events streaming `body` would give, each block in one delta unless `fragments` says
    how a tool_use's JSON text arrives."""
    start = {**body, "content": [], "stop_reason": None, "usage": {**body["usage"]}}
    start["usage"]["output_tokens"] = 1
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(body["content"]):
        first = {**block, "text": ""} if block["type"] == "text" else block
        if block["type"] == "thinking":
            first = {**block, "thinking": "", "signature": ""}
        elif block["type"] in ("tool_use", "server_tool_use"):
            first = {**block, "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": first})
        for delta in _deltas_for(block, (fragments or {}).get(i)):
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": body["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _deltas_for(block: dict[str, Any], fragments: list[str] | None) -> list[dict[str, Any]]:
    if block["type"] == "text":
        return [{"type": "text_delta", "text": block["text"]}]
    if block["type"] == "thinking":
        return [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    if block["type"] in ("tool_use", "server_tool_use"):
        if fragments is None:
            fragments = ["", json.dumps(block["input"], ensure_ascii=False)]
        return [{"type": "input_json_delta", "partial_json": f} for f in fragments]
    return []


# -- the wire traces -----------------------------------------------------------------------------

FINISHES = {
    "weather.json": StopReason.completed,
    "cache_off.json": StopReason.completed,
    "weather.stream.json": StopReason.completed,
    "tool_error.json": StopReason.completed,
    "max_tokens_tool.stream.json": StopReason.completed,
    "refusal.json": StopReason.refusal,
    "thinking.json": StopReason.completed,
    "thinking_after_fallback.json": StopReason.completed,
    "unknown_stop.json": StopReason.completed,
    "malformed_args.json": StopReason.completed,
    "overloaded.stream.json": StopReason.completed,
    "finalize.json": StopReason.max_turns,
    "chart.json": StopReason.completed,
    "web_search.stream.json": StopReason.completed,
    "strict_tool.json": StopReason.completed,
    "final_answer.json": StopReason.finish_tool,
    "native_output.json": StopReason.completed,
    "output_native.stream.json": StopReason.completed,
    "output_tool.stream.json": StopReason.finish_tool,
    "prefill.json": StopReason.completed,
    "fallback.json": StopReason.completed,
    "fallback_from_deepseek.json": StopReason.completed,
    "trip.json": StopReason.completed,
    "tool_search.json": StopReason.completed,
}

# Deliberate departures from the SDK's types, each with the value that makes the body conform: the
# trace exists to show the codec coping with exactly that departure, and nothing else may differ.
OFF_SCHEMA = {
    ("malformed_args.json", 0): (("content", 1, "input"), {}),
    ("unknown_stop.json", 0): (("stop_reason",), "end_turn"),
}

STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)


def _patched(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def _validate_event(event: dict[str, Any]) -> None:
    if event["type"] == "ping":
        assert event == {"type": "ping"}
    elif event["type"] == "error":  # not in RawMessageStreamEvent: it has the error body's shape
        ErrorResponse.model_validate(event)
    else:
        STREAM_EVENT.validate_python(event)


def test_the_trace_directory_holds_exactly_the_known_traces() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(FINISHES)


@pytest.mark.parametrize("name", sorted(FINISHES))
def test_every_recorded_response_has_the_sdks_shape(name: str) -> None:
    trace = load(name)
    assert (trace["format"], trace["provider"], trace["hand_written"]) == (
        "turnstile-trace/1",
        "anthropic",
        True,
    )
    assert trace["loop"]["stream"] is name.endswith(".stream.json")
    for n, exchange in enumerate(trace["exchanges"]):
        assert (exchange["request"]["method"], exchange["request"]["path"]) == (
            "POST",
            "/v1/messages",
        )
        response = exchange["response"]
        assert response["headers"]["request-id"].startswith("req_")
        if response["status"] != 200:  # the errors page's shape, and whether to retry
            assert set(response["headers"]) == {"content-type", "request-id", "x-should-retry"}
            ErrorResponse.model_validate(response["body"])
            continue
        assert set(response["headers"]) == {"content-type", "request-id"}
        if trace["loop"]["stream"]:
            assert response["headers"]["content-type"].startswith("text/event-stream")
            assert response["sse"].startswith("event: message_start\n")
            assert response["sse"].endswith("\n\n")
            for event in parse_sse(response["sse"]):
                _validate_event(event)
            continue
        assert response["headers"]["content-type"] == "application/json"
        body = response["body"]
        if (name, n) in OFF_SCHEMA:
            with pytest.raises(pydantic.ValidationError):
                Message.model_validate(body)
            body = _patched(body, *OFF_SCHEMA[(name, n)])
        Message.model_validate(body)


@pytest.mark.parametrize("name", sorted(FINISHES))
def test_recorded_requests_are_exactly_what_the_loop_sends(name: str) -> None:
    trace = load(name)
    requests, finish = replay(trace)
    assert requests == [exchange["request"]["body"] for exchange in trace["exchanges"]]
    assert finish.reason is FINISHES[name]


def test_weather_two_exchanges() -> None:
    trace = load("cache_off.json")  # weather.json's conversation, bodies without breakpoints
    (first, second) = trace["exchanges"]
    request = first["request"]["body"]
    assert request == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "你是一个天气助手。",
        "messages": [{"role": "user", "content": "北京和上海哪个更暖和?"}],
        "tools": [
            {
                "name": "get_weather",
                "description": "查询城市的实时天气",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "城市名,例如 北京"}},
                    "required": ["city"],
                },
            }
        ],
    }
    reply = decode(first["response"]["body"])
    bj, sh = "toolu_01Vb7Ny3Lk9QeTz2XcR5mHfA", "toolu_01Ds4Wp8Jm2KxGh6YtN9aBvE"
    assert reply == ModelResponse(
        [
            Text("我来帮您查询北京和上海的实时天气。"),
            ToolCall(bj, "get_weather", {"city": "北京"}),
            ToolCall(sh, "get_weather", {"city": "上海"}),
        ],
        ModelStop.tool_use,
        Usage(512, 121),
        id="msg_01Q5Kc2pXh7vRz9dWmYt3LbN",
        model="claude-sonnet-4-5-20250929",
    )
    messages = second["request"]["body"]["messages"]
    assert messages[1:] == [
        {"role": "assistant", "content": first["response"]["body"]["content"]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": bj, "content": WEATHER["北京"]},
                {"type": "tool_result", "tool_use_id": sh, "content": WEATHER["上海"]},
            ],
        },
    ]
    answer = decode(second["response"]["body"])
    assert (answer.stop, answer.usage) == (ModelStop.end_turn, Usage(293, 130))
    assert (reply.usage + answer.usage) == Usage(805, 251)
    assert text_of(answer.content).startswith("根据实时天气数据:上海更暖和,目前气温 29°C")


def test_weather_stream_matches_its_plain_twin_and_shows_every_increment() -> None:
    streamed, plain = load("weather.stream.json"), load("weather.json")
    for s, p in zip(streamed["exchanges"], plain["exchanges"], strict=True):
        acc = StreamAccumulator()
        deltas = [d for e in parse_sse(s["response"]["sse"]) for d in acc.feed(e)]
        got, want = acc.result(), decode(p["response"]["body"])
        assert [type(x) for x in got.content] == [type(x) for x in want.content]
        assert (got.stop, got.usage, text_of(got.content)) == (
            want.stop,
            want.usage,
            text_of(want.content),
        )
        assert "".join(d.text for d in deltas if type(d) is TextDelta) == text_of(got.content)
        for index, part in enumerate(got.content):
            if type(part) is ToolCall:
                fragments = [d for d in deltas if type(d) is ArgumentsDelta and d.index == index]
                assert {(d.call_id, d.name) for d in fragments} == {(part.id, part.name)}
                assert fragments[0].fragment == ""  # the announcement when the block starts
                assert json.loads("".join(d.fragment for d in fragments)) == part.arguments
    assert streamed["exchanges"][1]["request"]["body"]["stream"] is True


def test_thinking_goes_back_verbatim_in_the_next_request() -> None:
    trace = load("thinking.json")
    first, second = trace["exchanges"]
    sent = first["response"]["body"]["content"]
    reply = decode(first["response"]["body"])
    assert reply.content[:2] == [
        Thinking(sent[0]["thinking"], signature=sent[0]["signature"]),
        Thinking("", redacted=True, provider_data={"data": sent[1]["data"]}),
    ]
    assert reply.usage.reasoning_tokens == 141
    request = second["request"]["body"]
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    echoed = request["messages"][1]
    assert echoed["role"] == "assistant"
    assert _canonical(echoed["content"]) == _canonical(sent)


def test_max_tokens_inside_a_tool_call_gives_an_incomplete_call() -> None:
    trace = load("max_tokens_tool.stream.json")
    events = parse_sse(trace["exchanges"][0]["response"]["sse"])
    assert [e for e in events if e["type"] == "content_block_stop"][-1]["index"] == 1
    reply = accumulate(events)
    assert reply.stop is ModelStop.max_tokens
    assert reply.content[1] == ToolCall(
        "toolu_01Lw2Kp7Yd4Nq9Xc6Tr3Vb8H", "get_weather", {"city": "北京"}
    )
    assert reply.content[2] == ToolCall(
        "toolu_01Cx9Tv5Jh3Wb8Rm2Ln6Pq4Z",
        "get_weather",
        {},
        raw_arguments='{"city": "上',
        complete=False,
    )
    resent = trace["exchanges"][1]["request"]["body"]["messages"]
    assert resent[1]["content"][2]["input"] == {}
    assert resent[2]["content"][1]["is_error"] is True


def test_refusal_keeps_the_text_the_model_wrote() -> None:
    reply = decode(load("refusal.json")["exchanges"][0]["response"]["body"])
    assert reply == ModelResponse(
        [Text("我不能帮助编写用来绕过杀毒软件的勒索软件。")],
        ModelStop.refusal,
        Usage(37, 21),
        id="msg_01Tb6Kx3Wn9Qr2Lv5Hc8Zd4P",
        model="claude-sonnet-4-5-20250929",
    )


def test_an_unknown_stop_reason_is_other_and_kept() -> None:
    reply = decode(load("unknown_stop.json")["exchanges"][0]["response"]["body"])
    assert (reply.stop, reply.raw_stop) == (ModelStop.other, "interrupted")
    assert text_of(reply.content) == "北京是中国的首都,有三千多年的建城史。"


def test_malformed_arguments_are_kept_raw_and_sent_back_as_an_empty_object() -> None:
    trace = load("malformed_args.json")
    reply = decode(trace["exchanges"][0]["response"]["body"])
    assert reply.content[1] == ToolCall(
        "toolu_01Xr7Nd3Kq9Wt5Lc2Hv8Jm4B",
        "get_weather",
        {},
        raw_arguments=json.dumps('{"city": "北京"', ensure_ascii=False),
    )
    resent = trace["exchanges"][1]["request"]["body"]["messages"]
    assert resent[1]["content"][1]["input"] == {}
    assert resent[2]["content"][0]["is_error"] is True


SERVER_CALL = {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_fetch", "input": {}}


@pytest.mark.parametrize("fragments", [[], [""], ["", " "]])
@pytest.mark.parametrize(
    ("block", "stop"),
    [(tool_use(value={}), "tool_use"), (SERVER_CALL, "tool_use"), (SERVER_CALL, "max_tokens")],
    ids=["tool_use", "server", "server cut"],
)
def test_a_streamed_tool_call_with_no_arguments_decodes_as_empty_input(
    block: dict[str, Any], stop: str, fragments: list[str]
) -> None:
    """No input_json_delta, or only blank ones, is the `input: {}` the body holds (a tool_use
    cut by max_tokens keeps its blank text, as a cut call does in every format: test_wire)."""
    body = message([{"type": "text", "text": "查一下。"}, block], stop)
    assert accumulate(stream_of(body, {1: fragments})) == decode(copy.deepcopy(body))


def test_an_overloaded_error_event_fails_the_stream_for_good() -> None:
    events = parse_sse(load("overloaded.stream.json")["exchanges"][0]["response"]["sse"])
    acc = StreamAccumulator()
    for event in events[:-1]:
        acc.feed(event)
    with pytest.raises(ProviderError) as raised:
        acc.feed(events[-1])
    assert (raised.value.kind, raised.value.retryable) == ("overloaded_error", True)
    assert "Overloaded" in str(raised.value)
    with pytest.raises(ProviderError) as again:
        acc.feed({"type": "ping"})
    assert again.value is raised.value
    with pytest.raises(ProviderError) as later:
        acc.result()
    assert later.value is raised.value


def test_the_finalize_request_declares_the_called_tools_and_forbids_calling_them() -> None:
    trace = load("finalize.json")
    request = trace["exchanges"][1]["request"]["body"]
    assert request["tools"] == [
        {"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": MARK}
    ]
    assert request["tool_choice"] == {"type": "none"}
    last = request["messages"][-1]
    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result", "text"]
    assert last["content"][-1]["text"] == Guards().finalize_prompt


# -- encode ------------------------------------------------------------------------------------

BJ_CALL = ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", {"city": "北京"})


def request(
    *messages: CoreMessage, tools: tuple[ToolSpec, ...] = (), system: str | None = None
) -> Any:
    return ModelRequest(system, list(messages), tools, 512)


def test_encode_a_plain_request() -> None:
    body = encode(request(UserMessage("你好")), model="claude-sonnet-4-5")
    assert body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "你好"}],
    }


def test_encode_options_are_merged_last_and_win() -> None:
    spec = ToolSpec("get_weather", "查询城市的实时天气")
    body = encode(
        request(UserMessage("hi"), tools=(spec,), system="be brief"),
        model="m",
        temperature=0.2,
        stream=True,
        tool_choice={"type": "any"},
        metadata={"user_id": "u-1"},
        max_tokens=64,
    )
    assert body == {
        "model": "m",
        "max_tokens": 64,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "name": "get_weather",
                "description": "查询城市的实时天气",
                "input_schema": {"type": "object", "properties": {}},
            }
        ],
        "temperature": 0.2,
        "stream": True,
        "tool_choice": {"type": "any"},
        "metadata": {"user_id": "u-1"},
    }


def test_encode_leaves_out_an_empty_tool_description() -> None:
    body = encode(request(UserMessage("hi"), tools=(ToolSpec("now"),)), model="m")
    assert body["tools"] == [{"name": "now", "input_schema": {"type": "object", "properties": {}}}]


def test_encode_tool_results_become_one_user_message_and_a_prompt_joins_it() -> None:
    other = ToolCall("toolu_01B", "get_weather", {"city": "上海"})
    body = encode(
        request(
            UserMessage("q"),
            AssistantMessage([BJ_CALL, other]),
            ToolResults([ToolResult(BJ_CALL.id, "26°C"), ToolResult(other.id, "boom", True)]),
            UserMessage("now answer"),
        ),
        model="m",
    )
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": BJ_CALL.id, "content": "26°C"},
            {"type": "tool_result", "tool_use_id": other.id, "content": "boom", "is_error": True},
            {"type": "text", "text": "now answer"},
        ],
    }
    assert len(body["messages"]) == 3


def test_encode_empty_tool_results_stay_valid() -> None:
    body = encode(
        request(
            UserMessage("q"),
            AssistantMessage([BJ_CALL, ToolCall("toolu_01B", "get_weather", {})]),
            ToolResults([ToolResult(BJ_CALL.id, ""), ToolResult("toolu_01B", "", is_error=True)]),
        ),
        model="m",
    )
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": BJ_CALL.id},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01B",
            "content": "(the tool failed without a message)",
            "is_error": True,
        },
    ]


def test_encode_calls_with_unusable_arguments_still_send_an_object() -> None:
    broken = ToolCall("toolu_01C", "get_weather", {}, raw_arguments='{"city": ')
    cut = ToolCall(
        "toolu_01D",
        "get_weather",
        {"city": "上海"},
        raw_arguments='{"city": "上海", "u',
        complete=False,
    )
    body = encode(request(UserMessage("q"), AssistantMessage([broken, cut])), model="m")
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_01C", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "toolu_01D", "name": "get_weather", "input": {"city": "上海"}},
    ]


def test_encode_thinking_signed_redacted_and_unusable() -> None:
    parts: list[Any] = [
        Thinking("let me see", signature="sig-1"),
        Thinking("", redacted=True, provider_data={"data": "opaque-1"}),
        Thinking("", signature="opaque-2", redacted=True),
        Thinking("from another provider"),
        Thinking("", redacted=True, provider_data={"encrypted_content": "x"}),
        Text("ok"),
    ]
    body = encode(request(UserMessage("q"), AssistantMessage(parts)), model="m")
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "let me see", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque-1"},
        {"type": "redacted_thinking", "data": "opaque-2"},
        {"type": "text", "text": "ok"},
    ]


def test_encode_an_empty_reply_is_dropped_and_the_user_turns_merge() -> None:
    for empty in ([], [Text("")], [Text(" \n")], [Thinking("unsigned")]):
        body = encode(
            request(UserMessage("first"), AssistantMessage(empty), UserMessage("again")),
            model="m",
        )
        assert body["messages"] == [
            {
                "role": "user",
                "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "again"}],
            }
        ]
        last = encode(request(UserMessage("first"), AssistantMessage(empty)), model="m")
        assert last["messages"] == [{"role": "user", "content": "first"}]


def test_encode_without_tools_declares_the_ones_history_called() -> None:
    other = ToolCall("toolu_01E", "get_time", {})
    history = [
        UserMessage("q"),
        AssistantMessage([BJ_CALL, other, ToolCall("toolu_01F", "get_weather", {"city": "上海"})]),
        ToolResults(
            [
                ToolResult(BJ_CALL.id, "26"),
                ToolResult("toolu_01E", "9:00"),
                ToolResult("toolu_01F", "29"),
            ]
        ),
        UserMessage("final answer please"),
    ]
    body = encode(ModelRequest(None, history, (), 256, Purpose.finalize), model="m")
    assert body["tools"] == [
        {"name": "get_weather", "input_schema": {"type": "object"}},
        {"name": "get_time", "input_schema": {"type": "object"}},
    ]
    assert body["tool_choice"] == {"type": "none"}
    assert body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": BJ_CALL.id,
        "name": "get_weather",
        "input": {"city": "北京"},
    }
    chosen = encode(ModelRequest(None, history, (), 256), model="m", tool_choice={"type": "auto"})
    assert chosen["tool_choice"] == {"type": "auto"}


def test_encode_rejects_what_is_not_a_message() -> None:
    with pytest.raises(TypeError, match="not a message"):
        encode(request(UserMessage("q"), Text("stray")), model="m")  # type: ignore[arg-type]


def test_encode_takes_max_tokens_from_the_request() -> None:
    body = encode(ModelRequest(None, [UserMessage("q")], (), 7), model="m")
    assert body["max_tokens"] == 7


# -- decode ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "stop", "kept"),
    [
        ("end_turn", ModelStop.end_turn, None),
        ("tool_use", ModelStop.tool_use, None),
        ("max_tokens", ModelStop.max_tokens, None),
        ("stop_sequence", ModelStop.stop_sequence, None),
        ("pause_turn", ModelStop.pause, "pause_turn"),
        ("refusal", ModelStop.refusal, None),
        ("model_context_window_exceeded", ModelStop.max_tokens, "model_context_window_exceeded"),
        ("compaction", ModelStop.other, "compaction"),
        ("", ModelStop.other, ""),
    ],
)
def test_decode_stop_reasons(raw: str, stop: ModelStop, kept: str | None) -> None:
    reply = decode(message([{"type": "text", "text": "hi"}], raw))
    assert (reply.stop, reply.raw_stop) == (stop, kept)


def test_decode_usage_counts_the_whole_prompt() -> None:
    body = message(
        [],
        input_tokens=12,
        output_tokens=300,
        cache_read_input_tokens=1000,
        cache_creation_input_tokens=200,
        output_tokens_details={"thinking_tokens": 250},
    )
    assert decode(body).usage == Usage(1212, 300, 1000, 200, 250)
    nulls = message([], cache_read_input_tokens=None, cache_creation_input_tokens=None)
    assert decode(nulls).usage == Usage(10, 5)


def test_decode_an_empty_reply() -> None:
    assert decode(message([])) == ModelResponse(
        [], ModelStop.end_turn, Usage(10, 5), id=ID, model="claude-sonnet-4-5-20250929"
    )


def test_decode_keeps_server_tool_and_unknown_blocks_verbatim() -> None:
    blocks = [
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
        {"type": "text", "text": "found it", "citations": None},
        {"type": "hologram", "payload": 3},
    ]
    assert decode(message(blocks)).content == [
        Opaque("anthropic_messages", blocks[0]),
        Opaque("anthropic_messages", blocks[1]),
        Text("found it"),
        Opaque("anthropic_messages", blocks[3]),
    ]


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        ([1, 2], "[1, 2]"),
        ('{"city": "北京"', '"{\\"city\\": \\"北京\\""'),
        (3, "3"),
        (None, "null"),
    ],
)
def test_decode_a_tool_input_that_is_not_an_object(value: Any, raw: str) -> None:
    reply = decode(message([tool_use(value=value)], "tool_use"))
    assert reply.content == [ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", {}, raw)]


def test_decode_a_trailing_tool_call_cut_by_max_tokens_is_incomplete() -> None:
    for stop in ("max_tokens", "model_context_window_exceeded"):
        reply = decode(
            message(
                [tool_use("toolu_01A"), {"type": "text", "text": "x"}, tool_use("toolu_01B")], stop
            )
        )
        assert [p.complete for p in reply.content if type(p) is ToolCall] == [True, False]
    whole = decode(message([tool_use("toolu_01A")], "tool_use"))
    assert whole.content[0].complete is True  # type: ignore[union-attr]


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in message([]).items() if k != key}


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([], ""),
        (_without("content"), "content"),
        ({**message([]), "content": {}}, "content"),
        (_without("stop_reason"), "stop_reason"),
        (message([], None), "stop_reason"),
        (_without("usage"), "usage"),
        ({**message([]), "usage": {"output_tokens": 5}}, "usage.input_tokens"),
        (
            {**message([]), "usage": {"input_tokens": 5, "output_tokens": "5"}},
            "usage.output_tokens",
        ),
        (
            {**message([]), "usage": {"input_tokens": True, "output_tokens": 5}},
            "usage.input_tokens",
        ),
        (message([], cache_read_input_tokens="many"), "usage.cache_read_input_tokens"),
        (
            message([], output_tokens_details={"thinking_tokens": 1.5}),
            "usage.output_tokens_details.thinking_tokens",
        ),
        (message(["hi"]), "content[0]"),
        (message([{"text": "hi"}]), "content[0].type"),
        (message([{"type": "text"}]), "content[0].text"),
        (message([{"type": "thinking", "signature": "s"}]), "content[0].thinking"),
        (message([{"type": "redacted_thinking"}]), "content[0].data"),
        (message([{"type": "text", "text": "a"}, {**tool_use(), "id": None}]), "content[1].id"),
        (
            message(
                [{"type": "text", "text": "a"}, {"type": "tool_use", "name": "f", "input": {}}]
            ),
            "content[1].id",
        ),
        (message([{**tool_use(), "id": ""}]), "content[0].id"),
        (message([{"type": "tool_use", "id": "toolu_1", "input": {}}]), "content[0].name"),
        (message([{"type": "tool_use", "id": "toolu_1", "name": "f"}]), "content[0].input"),
        ({"type": "error", "error": "overloaded"}, "error"),
        ({"type": "error", "error": {"message": "?"}}, "error.type"),
    ],
)
def test_decode_names_the_missing_or_broken_field(body: Any, path: str) -> None:
    with pytest.raises(DecodeError) as raised:
        decode(body)
    assert raised.value.path == path


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, True),
        ({"type": "api_error", "message": "Internal server error"}, True),
        ({"type": "rate_limit_error", "message": "Number of requests exceeded"}, True),
        ({"type": "timeout_error", "message": "Request timed out"}, True),
        ({"type": "invalid_request_error", "message": "max_tokens: Field required"}, False),
        ({"type": "authentication_error", "message": "invalid x-api-key"}, False),
        ({"type": "permission_error", "message": "no"}, False),
        ({"type": "not_found_error", "message": "model: claude-9"}, False),
        ({"type": "billing_error", "message": "credit balance too low"}, False),
        (
            {
                "type": "rate_limit_error",
                "message": "spend limit",
                "details": {"error_code": "enforced_spend_limit_reached"},
            },
            False,
        ),
        ({"type": "brand_new_error"}, False),
    ],
)
def test_decode_an_error_body_raises_provider_error(error: dict[str, Any], retryable: bool) -> None:
    body = {"type": "error", "error": error, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
    with pytest.raises(ProviderError) as raised:
        decode(body)
    assert (raised.value.kind, raised.value.retryable) == (error["type"], retryable)
    assert error.get("message", "") in str(raised.value)


# -- the stream accumulator ----------------------------------------------------------------------


def test_stream_deltas_carry_the_part_index() -> None:
    body = message(
        [
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"q": 1},
            },
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "查一下"},
            tool_use(),
        ],
        "tool_use",
    )
    acc = StreamAccumulator()
    deltas = [d for event in stream_of(body) for d in acc.feed(event)]
    assert deltas == [
        ThinkingDelta(1, "hmm"),
        TextDelta(2, "查一下"),
        ArgumentsDelta(3, "toolu_01A09q90qw90lq917835lq9", "get_weather", ""),
        ArgumentsDelta(3, "toolu_01A09q90qw90lq917835lq9", "get_weather", '{"city": "北京"}'),
    ]
    assert acc.result() == decode(body)


def test_stream_content_that_arrives_with_its_start_counts() -> None:
    body = message(
        [
            {"type": "text", "text": "你好"},
            tool_use(),
            {"type": "text", "text": "!"},
            {"type": "thinking", "thinking": "嗯", "signature": ""},
        ]
    )
    start = {**stream_of(body)[0]}
    start["message"] = {**start["message"], "content": body["content"][:2]}
    acc = StreamAccumulator()
    assert acc.feed(start) == [
        TextDelta(0, "你好"),
        ArgumentsDelta(1, "toolu_01A09q90qw90lq917835lq9", "get_weather", ""),
    ]
    assert acc.feed(_open(2, type="text", text="!")) == [TextDelta(2, "!")]
    assert acc.feed(_open(3, type="thinking", thinking="嗯", signature="")) == [
        ThinkingDelta(3, "嗯")
    ]
    for event in stream_of(body)[-2:]:
        acc.feed(event)
    assert acc.result() == decode(body)


def test_stream_usage_in_message_delta_replaces_what_came_before() -> None:
    body = message([{"type": "text", "text": "hi"}], input_tokens=40, cache_read_input_tokens=7)
    events = stream_of(body)
    first_delta = {**events[-2], "usage": {"output_tokens": 3}}
    last_delta = {
        **events[-2],
        "usage": {"output_tokens": 9, "input_tokens": 41, "cache_read_input_tokens": None},
    }
    reply = accumulate([*events[:-2], first_delta, last_delta, events[-1]])
    assert reply.usage == Usage(48, 9, 7)


def test_stream_a_tool_without_arguments_gets_an_empty_object() -> None:
    body = message([tool_use(value={})], "tool_use")
    for fragments in ([], [""], ["", ""], ["{", "}"], [" "]):
        assert accumulate(stream_of(body, {0: fragments})) == decode(body)


def test_stream_ignores_pings_and_unknown_events_anywhere() -> None:
    body = message([{"type": "text", "text": "hi"}, tool_use()], "tool_use")
    events = stream_of(body)
    noisy = [{"type": "ping"}]
    for event in events:
        noisy += [event, {"type": "ping"}, {"type": "future_event", "x": 1}]
    acc = StreamAccumulator()
    assert acc.feed({"type": "ping"}) == []
    assert accumulate(noisy) == decode(body)


def test_stream_signature_delta_replaces() -> None:
    body = message([{"type": "thinking", "thinking": "t", "signature": "final"}])
    events = stream_of(body)
    early = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "signature_delta", "signature": "early"},
    }
    assert accumulate([*events[:2], early, *events[2:]]) == decode(body)


def test_stream_ended_early_is_a_retryable_incomplete_stream() -> None:
    events = stream_of(message([{"type": "text", "text": "hi"}]))
    for cut in (0, 1, 3, len(events) - 1):
        acc = StreamAccumulator()
        for event in events[:cut]:
            acc.feed(event)
        with pytest.raises(ProviderError) as raised:
            acc.result()
        assert (raised.value.kind, raised.value.retryable) == ("incomplete_stream", True)


def test_stream_cut_by_max_tokens_salvages_complete_members() -> None:
    head = '{"city": "上海", "note": "a \\"quoted\\", word", "days": ['
    cases = [
        ('{"city": "上海", "unit": "cel', {"city": "上海"}),
        ('{"city": "上海", "unit"', {"city": "上海"}),
        ('[{"city": "上海"}, "x"', {}),
        ('{"city": "上海", "unit": "celsius"', {"city": "上海", "unit": "celsius"}),
        ('{"city": "上海", "days": 1', {"city": "上海"}),
        ('{"city": "上海", "ok": true', {"city": "上海", "ok": True}),
        ('{"city": "上海", "at": {"lat": 31.2, "lon"', {"city": "上海"}),
        ('{"city": "上海", "at": {"lat": 31.2}', {"city": "上海", "at": {"lat": 31.2}}),
        (head + "1, 2", {"city": "上海", "note": 'a "quoted", word'}),
        ('{"city": "上海\\', {}),
        ('{"ci', {}),
        ("", {}),
    ]
    body = message([{"type": "text", "text": "x"}, tool_use(value={})], "max_tokens")
    for text, salvaged in cases:
        events = [
            e
            for e in stream_of(body, {1: ["", text]})
            if e != {"type": "content_block_stop", "index": 1}
        ]
        call = accumulate(events).content[1]
        assert call == ToolCall(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            salvaged,
            raw_arguments=text,
            complete=False,
        ), text


def test_stream_invalid_json_in_a_finished_call_is_kept_raw() -> None:
    body = message([tool_use(value={})], "tool_use")
    call = accumulate(stream_of(body, {0: ['{"city": "北京",', "}"]})).content[0]
    assert call == ToolCall(
        "toolu_01A09q90qw90lq917835lq9", "get_weather", {}, raw_arguments='{"city": "北京",}'
    )
    listed = accumulate(stream_of(body, {0: ["[1,", " 2]"]})).content[0]
    assert listed == ToolCall(
        "toolu_01A09q90qw90lq917835lq9", "get_weather", {}, raw_arguments="[1, 2]"
    )


def test_stream_joins_surrogate_halves_split_across_fragments() -> None:
    body = message([{"type": "text", "text": "晴😀"}, tool_use(value={"emoji": "😀"})], "tool_use")
    fragments = ['{"emoji": "\ud83d', '\ude00"}']
    events = stream_of(body, {1: fragments})
    text_start = next(
        i for i, e in enumerate(events) if e.get("delta", {}).get("type") == "text_delta"
    )
    halves = [
        {**events[text_start], "delta": {"type": "text_delta", "text": "晴\ud83d"}},
        {**events[text_start], "delta": {"type": "text_delta", "text": "\ude00"}},
    ]
    events[text_start : text_start + 1] = halves
    assert accumulate(parse_sse(to_sse(events))) == decode(body)


def test_stream_deltas_never_show_half_a_character() -> None:
    """on_delta sees a character split between two deltas once, whole, as the other formats
    show it; the reply is the same."""
    body = message([{"type": "text", "text": "晴😀!"}, tool_use(value={"e": "😀"})], "tool_use")
    events = stream_of(body, {1: ['{"e": "\ud83d', '\ude00"}']})
    text_at = next(
        i for i, e in enumerate(events) if e.get("delta", {}).get("type") == "text_delta"
    )
    events[text_at : text_at + 1] = [
        {**events[text_at], "delta": {"type": "text_delta", "text": "晴\ud83d"}},
        {**events[text_at], "delta": {"type": "text_delta", "text": "\ude00!"}},
    ]
    acc = StreamAccumulator()
    deltas = [d for event in events for d in acc.feed(event)]
    assert [d for d in deltas if type(d) is TextDelta] == [TextDelta(0, "晴"), TextDelta(0, "😀!")]
    fragments = [d.fragment for d in deltas if type(d) is ArgumentsDelta]
    assert fragments == ["", '{"e": "', '😀"}']
    assert acc.result() == decode(body)


def _start() -> dict[str, Any]:
    return stream_of(message([]))[0]


def _open(index: int, **block: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _add(index: int, **delta: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


TEXT_BLOCK = _open(0, type="text", text="")


@pytest.mark.parametrize(
    ("events", "path"),
    [
        ([{"index": 0}], "type"),
        (["ping"], ""),
        ([TEXT_BLOCK], "content_block_start"),
        ([{"type": "message_delta", "delta": {}, "usage": {}}], "message_delta"),
        ([{"type": "message_start"}], "message_start.message"),
        ([{"type": "message_start", "message": {"usage": {}}}], "message.content"),
        ([_start(), _start()], "message_start"),
        ([_start(), _open(1, type="text", text="")], "content_block_start.index"),
        ([_start(), _open(0, text="")], "content[0].type"),
        ([_start(), _open(0, type="tool_use", name="f", input={})], "content[0].id"),
        ([_start(), _open(0, type="tool_use", id="", name="f", input={})], "content[0].id"),
        ([_start(), _open(0, type="tool_use", id="toolu_1", input={})], "content[0].name"),
        ([_start(), _add(0, type="text_delta", text="x")], "content_block_delta.index"),
        (
            [_start(), TEXT_BLOCK, _add(0, type="input_json_delta", partial_json="{")],
            "content_block_delta.delta",
        ),
        ([_start(), TEXT_BLOCK, _add(0, type="text_delta")], "content_block_delta.delta.text"),
        ([_start(), {"type": "message_delta", "usage": {}}], "message_delta.delta"),
    ],
)
def test_stream_names_the_broken_event(events: list[Any], path: str) -> None:
    acc = StreamAccumulator()
    with pytest.raises(DecodeError) as raised:
        for event in events:
            acc.feed(event)
    assert raised.value.path == path


def test_stream_a_missing_stop_reason_is_a_decode_error() -> None:
    events = [e for e in stream_of(message([])) if e["type"] != "message_delta"]
    with pytest.raises(DecodeError) as raised:
        accumulate(events)
    assert raised.value.path == "stop_reason"


# -- properties --------------------------------------------------------------------------------

KNOWN_STOPS = [
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]
CHARS = st.one_of(st.sampled_from('北京"\\\n\t/😀é\x00\x1f\u2028'), st.characters(codec="utf-8"))
TEXTS = st.text(CHARS, max_size=30)
OPAQUE = st.text(string.ascii_letters + string.digits + "+/=", min_size=8, max_size=40)
IDS = st.text(string.ascii_letters + string.digits, min_size=22, max_size=22)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**15), 10**15)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(CHARS, max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(st.text(CHARS, max_size=8), JSON_VALUES, max_size=4)
BLOCKS = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, TEXTS),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, TEXTS, OPAQUE),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, OPAQUE),
    st.builds(
        lambda i, n, a: {"type": "tool_use", "id": "toolu_01" + i, "name": n, "input": a},
        IDS,
        st.sampled_from(["get_weather", "search_docs", "now"]),
        ARGUMENTS,
    ),
    st.builds(
        lambda i, q: {
            "type": "server_tool_use",
            "id": "srvtoolu_01" + i,
            "name": "web_search",
            "input": {"query": q},
        },
        IDS,
        TEXTS,
    ),
)
BODIES = st.builds(
    lambda content, stop, i, c, r, o: message(
        content,
        stop,
        input_tokens=i,
        cache_creation_input_tokens=c,
        cache_read_input_tokens=r,
        output_tokens=o,
    ),
    # the API never sends two tool_use blocks with one id: results could not tell them apart
    st.lists(BLOCKS, max_size=6, unique_by=lambda b: b.get("id", id(b))),
    st.sampled_from([*KNOWN_STOPS, "compaction"]),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
    st.integers(1, 10**5),
)


def _split(data: st.DataObject, text: str) -> list[str]:
    """`text` cut at random UTF-16 positions: inside escapes, between characters, and between the
    two halves of a surrogate pair."""
    units = text.encode("utf-16-le", "surrogatepass")
    n = len(units) // 2
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=6))) if n > 1 else []
    bounds = [0, *cuts, n]
    return [
        units[2 * a : 2 * b].decode("utf-16-le", "surrogatepass")
        for a, b in itertools.pairwise(bounds)
    ]


def _random_stream(body: dict[str, Any], data: st.DataObject) -> list[dict[str, Any]]:
    """The events of `body` streamed with every liberty the API takes: split text and JSON, an
    empty first partial_json or none at all, pings anywhere, a missing content_block_stop after a
    max_tokens cut, usage in message_delta either partial or cumulative-complete."""
    ascii_json = data.draw(st.booleans())
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "usage": {**body["usage"], "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    last = len(body["content"]) - 1
    for i, block in enumerate(body["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        first = block
        if kind == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _split(data, block["text"])]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": t} for t in _split(data, block["thinking"])
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind in ("tool_use", "server_tool_use"):
            first = {**block, "input": {}}
            if block["input"] or not data.draw(st.booleans()):
                whole = json.dumps(block["input"], ensure_ascii=ascii_json)
                fragments = [""] * data.draw(st.integers(0, 2)) + _split(data, whole)
                deltas = [{"type": "input_json_delta", "partial_json": f} for f in fragments]
        events.append({"type": "content_block_start", "index": i, "content_block": first})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        cut = body["stop_reason"] in ("max_tokens", "model_context_window_exceeded") and i == last
        if not (cut and data.draw(st.booleans())):
            events.append({"type": "content_block_stop", "index": i})
    usage = {"output_tokens": body["usage"]["output_tokens"]}
    if data.draw(st.booleans()):
        usage = {**body["usage"]}
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": usage,
        }
    )
    events.append({"type": "message_stop"})
    pings = data.draw(st.lists(st.integers(0, len(events)), max_size=3))
    for at in sorted(pings, reverse=True):
        events.insert(at, {"type": "ping"})
    return events


@settings(max_examples=100, deadline=None)
@given(body=BODIES, data=st.data())
def test_the_stream_folds_into_what_decode_gives(body: dict[str, Any], data: st.DataObject) -> None:
    if body["stop_reason"] in KNOWN_STOPS:
        Message.model_validate(body)
    acc = StreamAccumulator()
    deltas = [d for event in parse_sse(to_sse(_random_stream(body, data))) for d in acc.feed(event)]
    reply = acc.result()
    assert reply == decode(body)
    for index, part in enumerate(reply.content):
        shown = "".join(
            d.text for d in deltas if type(d) in (TextDelta, ThinkingDelta) and d.index == index
        )
        assert _healed(shown) == getattr(part, "text", "")


@settings(max_examples=100, deadline=None)
@given(arguments=ARGUMENTS, ascii_json=st.booleans(), data=st.data())
def test_the_fold_over_fragments_is_json_loads_of_the_whole(
    arguments: dict[str, Any], ascii_json: bool, data: st.DataObject
) -> None:
    whole = json.dumps(arguments, ensure_ascii=ascii_json)
    fragments = _split(data, whole)
    body = message([tool_use(value=arguments)], "tool_use")
    acc = StreamAccumulator()
    deltas = [d for event in stream_of(body, {0: fragments}) for d in acc.feed(event)]
    shown = [d.fragment for d in deltas if type(d) is ArgumentsDelta]
    assert shown[0] == "" and "".join(shown) == whole
    for fragment in shown:
        fragment.encode()  # a character is shown whole, never as a lone half
    (call,) = acc.result().content
    assert call == ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", json.loads(whole))


@settings(max_examples=100, deadline=None)
@given(body=BODIES)
def test_a_decoded_reply_goes_back_as_the_blocks_it_came_from(body: dict[str, Any]) -> None:
    reply = decode(body)
    history = [UserMessage("q"), AssistantMessage(reply.content), UserMessage("go on")]
    sent = encode(ModelRequest(None, history, (), 100), model="m")["messages"]
    kept = [b for b in body["content"] if b["type"] != "text" or b["text"].strip()]
    if kept:
        assert sent[1]["role"] == "assistant"
        assert _canonical(sent[1]["content"]) == _canonical(kept)
    else:
        assert [m["role"] for m in sent] == ["user"]


def _canonical(blocks: Any) -> str:
    return json.dumps(blocks, sort_keys=True, ensure_ascii=False)


def _healed(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


# -- encoding a growing history: each call reuses what the last one encoded ---------------------

import sys  # noqa: E402
import threading  # noqa: E402

from turnstile.core.messages import History  # noqa: E402
from turnstile.providers import WireCache  # noqa: E402

CACHE_PARTS = st.one_of(
    st.builds(Text, st.sampled_from(["", " ", "看看", "好的"])),
    st.builds(Thinking, st.just("想"), signature=st.sampled_from([None, "sig"])),
    st.builds(
        ToolCall,
        st.sampled_from(["c1", "c2"]),
        st.sampled_from(["get_weather", "lookup"]),
        st.fixed_dictionaries({"city": st.sampled_from(["北京", "上海"])}),
    ),
)
CACHE_MESSAGES = st.one_of(
    st.builds(UserMessage, st.sampled_from(["q", "继续"])),
    st.builds(AssistantMessage, st.lists(CACHE_PARTS, max_size=3)),
    st.builds(
        ToolResults,
        st.lists(st.builds(ToolResult, st.sampled_from(["c1", "c2"]), st.just("ok")), max_size=2),
    ),
)


def whole_body(messages: list[CoreMessage]) -> dict[str, Any]:
    """The body of a plain list of messages, which is never cached: the reference."""
    return encode(ModelRequest("s", list(messages), (), 100), model="m")


def view_body(ledger: list[CoreMessage], n: int, cache: WireCache) -> dict[str, Any]:
    """The body of the first `n` messages of `ledger` as a client sends them (a `History`)."""
    return encode(ModelRequest("s", History(ledger, n), (), 100), model="m", cache=cache)


@settings(max_examples=150, deadline=None)
@given(ledger=st.lists(CACHE_MESSAGES, max_size=8), data=st.data())
def test_views_of_a_history_encode_as_the_whole_list_in_any_order(
    ledger: list[CoreMessage], data: st.DataObject
) -> None:
    views = data.draw(st.lists(st.integers(0, len(ledger)), min_size=1, max_size=6))
    cache = WireCache()
    for n in views:
        assert view_body(ledger, n, cache) == whole_body(ledger[:n])


def test_a_growing_history_merges_across_calls_without_changing_earlier_bodies() -> None:
    ledger: list[CoreMessage] = [UserMessage("北京和上海哪个更暖和?")]
    cache = WireCache()
    bodies = []
    for message in [
        AssistantMessage([Text("查一下。"), BJ_CALL]),
        ToolResults([ToolResult(BJ_CALL.id, "26")]),
        UserMessage("请总结。"),  # joins the tool results' user message
        AssistantMessage([Text(" ")]),  # dropped, so the next prompt joins the last one again
        UserMessage("还在吗?"),
    ]:
        ledger.append(message)
        body = view_body(ledger, len(ledger), cache)
        bodies.append((len(ledger), copy.deepcopy(body), body))
    for n, snapshot, body in bodies:
        assert body == snapshot == whole_body(ledger[:n])
    assert bodies[-1][1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": BJ_CALL.id, "content": "26"},
        {"type": "text", "text": "请总结。"},
        {"type": "text", "text": "还在吗?"},
    ]


def test_a_ledger_whose_last_encoded_message_was_replaced_is_encoded_anew() -> None:
    ledger: list[CoreMessage] = [UserMessage("one"), AssistantMessage([Text("a")])]
    cache = WireCache()
    view_body(ledger, 2, cache)
    ledger[1] = AssistantMessage([Text("b")])
    ledger.append(UserMessage("two"))
    assert view_body(ledger, 3, cache) == whole_body(ledger)


def test_a_caller_changing_a_body_s_own_containers_leaves_the_next_body_alone() -> None:
    ledger: list[CoreMessage] = [UserMessage("q"), AssistantMessage([Text("a")])]
    cache = WireCache()
    body = view_body(ledger, 2, cache)
    body["messages"].append({"role": "user", "content": "injected"})
    body["messages"].pop(0)
    body["model"] = "other"
    ledger.append(UserMessage("next"))
    assert view_body(ledger, 3, cache) == whole_body(ledger)


def test_bodies_of_one_history_share_its_message_entries_until_it_is_forgotten() -> None:
    """The documented rule: entries are reused (read-only), and only for recent histories."""
    ledger: list[CoreMessage] = [UserMessage("q"), AssistantMessage([Text("a"), BJ_CALL])]
    cache = WireCache(size=4)
    before = view_body(ledger, 2, cache)["messages"]
    ledger.append(ToolResults([ToolResult(BJ_CALL.id, "26")]))
    after = view_body(ledger, 3, cache)["messages"]
    assert after[1] is before[1]
    for i in range(4):
        view_body([UserMessage(f"other {i}")], 1, cache)
    ledger.append(UserMessage("go on"))
    assert view_body(ledger, 4, cache)["messages"][1] is not before[1]
    assert view_body(ledger, 4, cache) == whole_body(ledger)


def test_threads_encoding_views_of_one_history_each_get_its_body() -> None:
    ledger: list[CoreMessage] = [UserMessage("q")]
    for i in range(30):
        call = ToolCall(f"c{i}", "get_weather", {"i": i})
        ledger += [
            AssistantMessage([Text(f"t{i}"), call]),
            ToolResults([ToolResult(call.id, "ok")]),
        ]
    expected = {n: whole_body(ledger[:n]) for n in range(len(ledger) + 1)}
    cache = WireCache()
    wrong: list[object] = []

    def work(order: list[int]) -> None:
        try:
            wrong.extend(n for n in order if view_body(ledger, n, cache) != expected[n])
        except Exception as exc:
            wrong.append(exc)

    orders = [list(range(len(ledger) + 1)), list(range(len(ledger), -1, -1))] * 2
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(order,)) for order in orders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []


# -- thinking across a fallback ----------------------------------------------------------------

THINKING_ON = {"type": "enabled", "budget_tokens": 1024}
FOREIGN_CALL = AssistantMessage(
    [Thinking("两个城市都要查"), ToolCall("call_00_Fd8s", "get_weather", {"city": "北京"})]
)
ANSWERED = ToolResults([ToolResult("call_00_Fd8s", "26°C")])


def test_a_turn_begun_without_signed_thinking_goes_on_with_thinking_off() -> None:
    """A tool-use loop is one assistant turn with one thinking configuration (Anthropic's
    thinking docs): a turn another model began has no signed thinking, so it goes on with
    thinking off, said in the body, until a user turn starts the next."""
    body = encode(
        request(UserMessage("q"), FOREIGN_CALL, ANSWERED), model="m", thinking=THINKING_ON
    )
    assert body["thinking"] == {"type": "disabled"}
    assert body["messages"][1]["content"][0]["type"] == "tool_use"
    later = request(UserMessage("q"), FOREIGN_CALL, ANSWERED, AssistantMessage([Text("26")]))
    body = encode(replace_messages(later, UserMessage("and now?")), model="m", thinking=THINKING_ON)
    assert body["thinking"] == THINKING_ON  # a new turn: the client's thinking again


def test_adaptive_thinking_is_left_as_asked_since_claude_itself_may_open_a_turn_without_it() -> (
    None
):
    adaptive = {"type": "adaptive"}
    body = encode(request(UserMessage("q"), FOREIGN_CALL, ANSWERED), model="m", thinking=adaptive)
    assert body["thinking"] == adaptive


def test_a_turn_begun_with_signed_thinking_keeps_thinking_on() -> None:
    signed = AssistantMessage([Thinking("hm", signature="sig"), *FOREIGN_CALL.content[1:]])
    body = encode(request(UserMessage("q"), signed, ANSWERED), model="m", thinking=THINKING_ON)
    assert body["thinking"] == THINKING_ON
    off = encode(request(UserMessage("q"), FOREIGN_CALL, ANSWERED), model="m")
    assert "thinking" not in off  # thinking never asked for is not written


def replace_messages(req: ModelRequest, *more: CoreMessage) -> ModelRequest:
    return msgspec.structs.replace(req, messages=[*req.messages, *more])
