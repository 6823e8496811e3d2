"""The OpenAI Chat Completions codec: encode, decode, streaming, and the fixtures' traces."""

from __future__ import annotations

import itertools
import json
import pathlib
from typing import Any

import msgspec
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types import ErrorObject
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from turnstile.core import (
    CallModel,
    Finish,
    Loop,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    RunTool,
    StopReason,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    ResultPart,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
)
from turnstile.core.request import Purpose
from turnstile.providers import openai_chat
from turnstile.providers._client import StreamReader
from turnstile.providers._deltas import ArgumentsDelta, TextDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._sse import events_json
from turnstile.providers.replay import RecordedTools, Trace, prompt_for, spec_for

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "openai-chat"
WEATHER = ToolSpec(
    name="get_weather",
    description="查询城市的实时天气",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "城市名,例如 北京"}},
        "required": ["city"],
    },
)


# -- helpers -------------------------------------------------------------------------------------


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def sse_chunks(text: str) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE text, up to `data: [DONE]` (the shared parser, checked apart)."""
    return events_json(text)


def accumulate(chunks: list[dict[str, Any]]) -> tuple[list[Any], ModelResponse]:
    acc = openai_chat.StreamAccumulator()
    deltas = [d for chunk in chunks for d in acc.feed(chunk)]
    return deltas, acc.result()


def body(message: dict[str, Any], finish: str | None = "stop", usage: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": usage,
    }


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": choices,
        **extra,
    }


def fn(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def request(*messages: Any, system: str | None = None, tools: tuple = ()) -> ModelRequest:
    return ModelRequest(system, list(messages), list(tools), 256)


def wire_messages(*messages: Any) -> list[dict[str, Any]]:
    return openai_chat.encode(request(*messages), model="m")["messages"]


# -- encode --------------------------------------------------------------------------------------


def test_encode_puts_the_system_prompt_first_and_omits_it_when_none() -> None:
    with_system = openai_chat.encode(request(UserMessage("hi"), system="be brief"), model="m")
    assert with_system["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert wire_messages(UserMessage("hi")) == [{"role": "user", "content": "hi"}]


def test_encode_sends_tools_as_functions_and_omits_them_when_empty() -> None:
    encoded = openai_chat.encode(request(UserMessage("hi"), tools=(WEATHER,)), model="gpt-4o")
    assert encoded == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "查询城市的实时天气",
                    "parameters": WEATHER.parameters,
                },
            }
        ],
        "max_completion_tokens": 256,
    }
    assert "tools" not in openai_chat.encode(request(UserMessage("hi")), model="gpt-4o")


def test_encode_assistant_joins_text_and_sends_tool_calls_with_json_string_arguments() -> None:
    reply = AssistantMessage(
        [
            Text("我来帮您"),
            Text("查询。"),
            ToolCall("call_a", "get_weather", {"city": "北京", "days": 2}),
        ]
    )
    assert wire_messages(UserMessage("q"), reply)[1] == {
        "role": "assistant",
        "content": "我来帮您查询。",
        "tool_calls": [fn("call_a", "get_weather", '{"city":"北京","days":2}')],
    }


def test_encode_assistant_content_is_null_with_only_tool_calls_and_empty_with_nothing() -> None:
    only_calls = AssistantMessage([ToolCall("call_a", "get_weather", {})])
    assert wire_messages(UserMessage("q"), only_calls)[1]["content"] is None
    assert wire_messages(UserMessage("q"), AssistantMessage([]))[1] == {
        "role": "assistant",
        "content": "",
    }


def test_encode_sends_raw_arguments_back_verbatim() -> None:
    cut = '{"title":"笔记","body":"今天北京'
    reply = AssistantMessage(
        [
            ToolCall("call_a", "save_note", {"title": "笔记"}, raw_arguments=cut, complete=False),
            ToolCall("call_b", "get_weather", {}, raw_arguments="{'city': '北京'}"),
        ]
    )
    calls = wire_messages(UserMessage("q"), reply)[1]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [cut, "{'city': '北京'}"]


def test_encode_drops_thinking_parts() -> None:
    reply = AssistantMessage(
        [
            Thinking("let me think", signature="sig"),
            Text("答案"),
            Thinking("", redacted=True, provider_data={"data": "x"}),
        ]
    )
    assert wire_messages(UserMessage("q"), reply)[1] == {"role": "assistant", "content": "答案"}
    thinking_and_call = AssistantMessage([Thinking("hmm"), ToolCall("call_a", "f", {})])
    assert wire_messages(UserMessage("q"), thinking_and_call)[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [fn("call_a", "f", "{}")],
    }


def test_encode_sends_one_tool_message_per_result_in_order_with_error_content_as_is() -> None:
    reply = AssistantMessage([ToolCall("call_a", "f", {}), ToolCall("call_b", "f", {})])
    results = ToolResults(
        [ToolResult("call_a", "ok"), ToolResult("call_b", "f failed: ValueError: boom", True)]
    )
    assert wire_messages(UserMessage("q"), reply, results)[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_b", "content": "f failed: ValueError: boom"},
    ]


def test_encode_tool_results_may_be_followed_by_a_user_message() -> None:
    reply = AssistantMessage([ToolCall("call_a", "f", {})])
    messages = wire_messages(
        UserMessage("q"), reply, ToolResults([ToolResult("call_a", "ok")]), UserMessage("finish")
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[-1] == {"role": "user", "content": "finish"}


def test_encode_uses_max_completion_tokens_and_merges_options() -> None:
    encoded = openai_chat.encode(
        ModelRequest(None, [UserMessage("q")], [], 1024, Purpose.finalize),
        model="gpt-4o",
        temperature=0.2,
        parallel_tool_calls=False,
    )
    assert encoded == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "q"}],
        "max_completion_tokens": 1024,
        "temperature": 0.2,
        "parallel_tool_calls": False,
    }
    assert "max_tokens" not in encoded


def test_encode_stream_asks_for_the_usage_chunk() -> None:
    req = request(UserMessage("q"))
    streamed = openai_chat.encode(req, model="m", stream=True)
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    explicit = openai_chat.encode(
        req, model="m", stream=True, stream_options={"include_obfuscation": False}
    )
    assert explicit["stream_options"] == {"include_usage": True, "include_obfuscation": False}
    no_usage = {"include_usage": False}
    opted_out = openai_chat.encode(req, model="m", stream=True, stream_options=no_usage)
    assert opted_out["stream_options"] == no_usage
    assert "stream_options" not in openai_chat.encode(req, model="m", stream=False)
    assert "stream_options" not in openai_chat.encode(req, model="m")


# -- decode --------------------------------------------------------------------------------------


def test_decode_the_seeds_first_reply() -> None:
    response = openai_chat.decode(load("weather.json")["exchanges"][0]["response"]["body"])
    assert response == ModelResponse(
        [
            Text("我来帮您查询北京和上海的实时天气。"),
            ToolCall("call_1DyQp7vR3kWm9XaT5bLcE2uN", "get_weather", {"city": "北京"}),
            ToolCall("call_7KxZs4nH8gFj2YtP6wMdA1qB", "get_weather", {"city": "上海"}),
        ],
        ModelStop.tool_use,
        Usage(input_tokens=512, output_tokens=121),
        id="chatcmpl-BwT4m2XoQ7fZ8rJc1Kd9sVn3LpEa",
        model="gpt-4o-2024-08-06",
    )


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", ModelStop.end_turn),
        ("length", ModelStop.max_tokens),
        ("content_filter", ModelStop.content_filter),
    ],
)
def test_decode_maps_finish_reasons(finish: str, stop: ModelStop) -> None:
    response = openai_chat.decode(body({"content": "x"}, finish))
    assert (response.stop, response.raw_stop) == (stop, None)


@pytest.mark.parametrize("finish", ["tool_calls", "function_call", "stop"])
def test_decode_a_reply_with_tool_calls_is_tool_use(finish: str) -> None:
    # "stop" is what OpenAI sends when tool_choice named the function.
    response = openai_chat.decode(body({"tool_calls": [fn("call_a", "f", "{}")]}, finish))
    assert response.stop is ModelStop.tool_use
    assert response.content == [ToolCall("call_a", "f", {})]


def test_decode_unknown_finish_reason_is_other_with_raw_stop() -> None:
    response = openai_chat.decode(load("unknown_stop.json")["exchanges"][0]["response"]["body"])
    assert response == ModelResponse(
        [Text("北京和上海的气候差异主要在于")],
        ModelStop.other,
        Usage(input_tokens=84, output_tokens=9, cache_read_tokens=64),
        raw_stop="insufficient_system_resource",
        id="chatcmpl-7f3b9e2a-4c1d-4e8f-9a6b-2d5c8e1f4a7b",
        model="deepseek-chat",
    )


def test_decode_refusal_is_text_with_stop_refusal_even_when_finish_is_stop() -> None:
    response = openai_chat.decode(load("refusal.json")["exchanges"][0]["response"]["body"])
    assert response.stop is ModelStop.refusal
    assert response.content == [
        Text("抱歉,我不能帮助撬开别人的门锁。如果你被锁在自己家门外,可以联系物业或正规开锁服务。")
    ]


def test_decode_content_filter_with_an_empty_message() -> None:
    response = openai_chat.decode(load("content_filter.json")["exchanges"][0]["response"]["body"])
    assert response == ModelResponse(
        [],
        ModelStop.content_filter,
        Usage(input_tokens=41),
        id="chatcmpl-BxD4f7Xh0Zj3Bl6Dn9Fp2Hr5Jt",
        model="gpt-4o-2024-08-06",
    )


def test_decode_empty_content_makes_no_text_part() -> None:
    assert openai_chat.decode(body({"content": ""})).content == []


def test_decode_usage_counts_cached_and_reasoning_tokens() -> None:
    usage = {
        "prompt_tokens": 2048,
        "completion_tokens": 300,
        "total_tokens": 2348,
        "prompt_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 256},
        "completion_tokens_details": {"reasoning_tokens": 192},
    }
    assert openai_chat.decode(body({"content": "x"}, usage=usage)).usage == Usage(
        input_tokens=2048,
        output_tokens=300,
        cache_read_tokens=1536,
        cache_write_tokens=256,
        reasoning_tokens=192,
    )
    assert openai_chat.decode(body({"content": "x"})).usage == Usage()


def test_decode_invalid_arguments_keep_the_raw_text() -> None:
    bad = '{"city":"北京"}{"city":"上海"}'
    response = openai_chat.decode(load("malformed_args.json")["exchanges"][0]["response"]["body"])
    assert response.content == [
        ToolCall("call_Rm3Jx8Kd1Wf6Yt4Na9Qs2Ve7", "get_weather", {}, raw_arguments=bad)
    ]
    assert response.stop is ModelStop.tool_use


@pytest.mark.parametrize("arguments", ['["北京"]', '"北京"', "3", "null", "{'city': 'x'}", "{"])
def test_decode_arguments_that_are_not_a_json_object_keep_the_raw_text(arguments: str) -> None:
    response = openai_chat.decode(body({"tool_calls": [fn("call_a", "f", arguments)]}))
    assert response.content == [ToolCall("call_a", "f", {}, raw_arguments=arguments)]


@pytest.mark.parametrize("arguments", ["", "  ", None])
def test_decode_blank_arguments_mean_no_arguments(arguments: str | None) -> None:
    call = {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": arguments}}
    response = openai_chat.decode(body({"tool_calls": [call]}, "tool_calls"))
    assert response.content == [ToolCall("call_a", "f", {})]


def test_decode_length_cut_inside_the_last_calls_arguments() -> None:
    """Only the last call can have been cut; an earlier bad one is merely malformed."""
    cut = '{"city":"北京","note":{"a":[1,2]},"days":3,"text":"今天\\",很'
    calls = [
        fn("call_a", "f", '{"city":"上海"}'),
        fn("call_b", "f", "{'x': 1}"),
        fn("call_c", "f", cut),
    ]
    response = openai_chat.decode(body({"tool_calls": calls}, "length"))
    assert response.stop is ModelStop.max_tokens
    assert response.content == [
        ToolCall("call_a", "f", {"city": "上海"}),
        ToolCall("call_b", "f", {}, raw_arguments="{'x': 1}"),
        ToolCall(
            "call_c",
            "f",
            {"city": "北京", "note": {"a": [1, 2]}, "days": 3},
            raw_arguments=cut,
            complete=False,
        ),
    ]


@pytest.mark.parametrize(
    ("cut", "salvaged"),
    [
        ("", {}),
        ('{"ci', {}),
        ('{"city":"北', {}),
        ('{"city":"北京"', {"city": "北京"}),  # a closed string cannot grow: complete
        ('{"a":"x,y\\"}","b', {"a": 'x,y"}'}),
        ('{"a":[1,{"b":2}],', {"a": [1, {"b": 2}]}),
        ('[{"a":1},', {}),
    ],
)
def test_decode_length_cut_salvages_the_members_known_complete(
    cut: str, salvaged: dict[str, Any]
) -> None:
    response = openai_chat.decode(body({"tool_calls": [fn("call_a", "f", cut)]}, "length"))
    assert response.content == [
        ToolCall("call_a", "f", salvaged, raw_arguments=cut, complete=False)
    ]


def test_decode_length_after_a_closed_object_is_a_complete_call() -> None:
    response = openai_chat.decode(body({"tool_calls": [fn("call_a", "f", '{"a":1}')]}, "length"))
    assert response.content == [ToolCall("call_a", "f", {"a": 1})]


def test_decode_a_tool_call_without_id_names_its_path() -> None:
    calls = [fn("call_a", "f", "{}"), {"type": "function", "function": {"name": "f"}}]
    with pytest.raises(DecodeError) as caught:
        openai_chat.decode(body({"tool_calls": calls}, "tool_calls"))
    assert caught.value.path == "choices[0].message.tool_calls[1].id"
    calls[1]["id"] = ""
    with pytest.raises(DecodeError) as caught:
        openai_chat.decode(body({"tool_calls": calls}, "tool_calls"))
    assert caught.value.path == "choices[0].message.tool_calls[1].id"


MESSAGE = "choices[0].message"
CALL = f"{MESSAGE}.tool_calls[0]"


def with_call(call: dict[str, Any]) -> dict[str, Any]:
    return body({"tool_calls": [call]}, "tool_calls")


@pytest.mark.parametrize(
    ("broken", "path"),
    [
        ({"object": "chat.completion"}, "choices"),
        ({"choices": []}, "choices"),
        ({"choices": [{"index": 0, "finish_reason": "stop"}]}, MESSAGE),
        ({"choices": [{"index": 0, "message": None}]}, MESSAGE),
        (body({"content": "x"}, None), "choices[0].finish_reason"),
        (body({"content": 3}), f"{MESSAGE}.content"),
        (body({"function_call": {"name": "f", "arguments": "{}"}}), f"{MESSAGE}.function_call"),
        (with_call({"id": "c", "type": "function"}), f"{CALL}.function"),
        (with_call({"id": "c", "function": {"arguments": "{}"}}), f"{CALL}.function.name"),
        (
            with_call({"id": "c", "function": {"name": "f", "arguments": {}}}),
            f"{CALL}.function.arguments",
        ),
        (with_call({"id": "c", "type": "custom", "custom": {"name": "f"}}), f"{CALL}.type"),
        (body({"content": "x"}, usage={"prompt_tokens": "12"}), "usage.prompt_tokens"),
        (
            body({"content": "x"}, usage={"prompt_tokens_details": []}),
            "usage.prompt_tokens_details",
        ),
    ],
)
def test_decode_errors_name_the_path(broken: dict[str, Any], path: str) -> None:
    with pytest.raises(DecodeError) as caught:
        openai_chat.decode(broken)
    assert caught.value.path == path


def error(kind: str, code: str | None) -> dict[str, Any]:
    return {"message": "it broke", "type": kind, "param": None, "code": code}


@pytest.mark.parametrize(
    ("raw", "kind", "retryable"),
    [
        (error("server_error", None), "server_error", True),
        (error("requests", "rate_limit_exceeded"), "rate_limit_exceeded", True),
        (error("insufficient_quota", "insufficient_quota"), "insufficient_quota", False),
        (error("invalid_request_error", None), "invalid_request_error", False),
        ({"message": "it broke"}, "error", False),
        ("it broke", "error", False),
    ],
)
def test_decode_an_error_body_raises_provider_error(raw: Any, kind: str, retryable: bool) -> None:
    with pytest.raises(ProviderError) as caught:
        openai_chat.decode({"error": raw})
    assert (caught.value.kind, caught.value.retryable) == (kind, retryable)
    assert str(caught.value) == f"{kind}: it broke"


# -- streaming -----------------------------------------------------------------------------------


def test_stream_matches_decode_of_the_same_reply() -> None:
    stream = load("weather.stream.json")["exchanges"][0]["response"]["sse"]
    whole = load("weather.json")["exchanges"][0]["response"]["body"]
    deltas, result = accumulate(sse_chunks(stream))
    assert result.id == "chatcmpl-BwT5a1LqR8vXn2Ke7Jd4Tc9Fm6Hs"  # another call's reply, as alike
    assert result == msgspec.structs.replace(openai_chat.decode(whole), id=result.id)
    assert [d for d in deltas if type(d) is TextDelta] == [
        TextDelta(0, t) for t in ["我来", "帮您", "查询", "北京", "和上海", "的实时", "天气。"]
    ]
    beijing, shanghai = "call_1DyQp7vR3kWm9XaT5bLcE2uN", "call_7KxZs4nH8gFj2YtP6wMdA1qB"
    pieces = ['{"', "city", '":"']
    assert [d for d in deltas if type(d) is ArgumentsDelta] == [
        *(ArgumentsDelta(1, beijing, "get_weather", f) for f in [*pieces, "北京", '"}']),
        *(ArgumentsDelta(2, shanghai, "get_weather", f) for f in [*pieces, "上海", '"}']),
    ]


def test_stream_usage_comes_from_the_chunk_after_finish_reason() -> None:
    acc = openai_chat.StreamAccumulator()
    acc.feed(chunk({"role": "assistant", "content": "hi"}, usage=None))
    acc.feed(chunk({}, "stop", usage=None))
    assert acc.result().usage == Usage()
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 2,
        "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert acc.feed(chunk(None, usage=usage)) == []
    assert acc.result() == ModelResponse(
        [Text("hi")],
        ModelStop.end_turn,
        Usage(input_tokens=9, output_tokens=2),
        id="chatcmpl-test",
        model="gpt-4o",
    )


def opening(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    """The first fragment of a streamed tool call: the only one with its id and name."""
    function = {"name": name, "arguments": arguments}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def more(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


def test_stream_routes_interleaved_tool_fragments_by_index() -> None:
    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    opening(0, "call_a", "get_weather", '{"ci'),
                    opening(1, "call_b", "get_time"),
                ]
            }
        ),
        chunk({"tool_calls": [more(1, '{"tz":')]}),
        chunk({"tool_calls": [more(0, 'ty":"上')]}),
        chunk({"tool_calls": [more(1, '"UTC"}')]}),
        chunk({"tool_calls": [{**more(0, '海"}'), "id": "call_a"}]}),
        chunk({}, "tool_calls"),
    ]
    deltas, result = accumulate(chunks)
    assert result.content == [
        ToolCall("call_a", "get_weather", {"city": "上海"}),
        ToolCall("call_b", "get_time", {"tz": "UTC"}),
    ]
    assert deltas == [
        ArgumentsDelta(0, "call_a", "get_weather", '{"ci'),
        ArgumentsDelta(1, "call_b", "get_time", '{"tz":'),
        ArgumentsDelta(0, "call_a", "get_weather", 'ty":"上'),
        ArgumentsDelta(1, "call_b", "get_time", '"UTC"}'),
        ArgumentsDelta(0, "call_a", "get_weather", '海"}'),
    ]


def test_stream_puts_text_first_then_tool_calls_in_index_order() -> None:
    chunks = [
        chunk({"tool_calls": [opening(0, "call_a", "f", "{}")]}),
        chunk({"tool_calls": [opening(1, "call_b", "g", "{}")]}),
        chunk({"content": "late text"}),
        chunk({}, "tool_calls"),
    ]
    _, result = accumulate(chunks)
    assert result.content == [
        Text("late text"),
        ToolCall("call_a", "f", {}),
        ToolCall("call_b", "g", {}),
    ]


def test_stream_skips_azure_chunks_without_choices_or_delta() -> None:
    trace = load("azure_prompt_filter.stream.json")
    chunks = sse_chunks(trace["exchanges"][0]["response"]["sse"])
    assert chunks[0]["choices"] == []
    acc = openai_chat.StreamAccumulator()
    assert acc.feed(chunks[0]) == []
    filter_only = chunk(None)
    filter_only["choices"] = [{"index": 0, "finish_reason": None, "content_filter_results": {}}]
    assert acc.feed(filter_only) == []
    for c in chunks[1:]:
        acc.feed(c)
    assert acc.result() == ModelResponse(
        [Text("上海是中国最大的经济中心,位于长江入海口。")],
        ModelStop.end_turn,
        Usage(input_tokens=19, output_tokens=21),
        id="chatcmpl-test",
        model="gpt-4o",
    )


def test_stream_error_chunk_raises_provider_error() -> None:
    trace = load("overloaded.stream.json")
    chunks = sse_chunks(trace["exchanges"][0]["response"]["sse"])
    acc = openai_chat.StreamAccumulator()
    deltas = [d for c in chunks[:-1] for d in acc.feed(c)]
    assert deltas == [TextDelta(0, "北京的"), TextDelta(0, "秋天")]
    with pytest.raises(ProviderError) as caught:
        acc.feed(chunks[-1])
    assert (caught.value.kind, caught.value.retryable) == ("server_error", True)
    assert "The server had an error" in str(caught.value)


def test_stream_cut_by_length_inside_arguments_is_an_incomplete_call() -> None:
    trace = load("max_tokens_tool.stream.json")
    _, result = accumulate(sse_chunks(trace["exchanges"][0]["response"]["sse"]))
    cut = '{"title":"北京与上海天气对比","body":"今天北京多云,气温 26°C,湿度 45%;上海晴,气温 29'
    assert result == ModelResponse(
        [
            Text("好的,我来写这篇笔记。"),
            ToolCall(
                "call_Hn4Wq8Tz2Rv6Ky0Mb3Xc7Js5",
                "save_note",
                {"title": "北京与上海天气对比"},
                raw_arguments=cut,
                complete=False,
            ),
        ],
        ModelStop.max_tokens,
        Usage(input_tokens=377, output_tokens=60),
        id="chatcmpl-BxB2d5Vf8Xh1Zj4Bl7Dn0Fp3Hr",
        model="gpt-4o-2024-08-06",
    )


def test_stream_refusal_is_text_with_stop_refusal() -> None:
    pieces = ["抱歉,", "我不能", "帮忙。"]
    chunks = [chunk({"role": "assistant", "content": None, "refusal": ""})]
    chunks += [chunk({"refusal": p}) for p in pieces] + [chunk({}, "stop")]
    deltas, result = accumulate(chunks)
    assert deltas == [TextDelta(0, p) for p in pieces]
    assert result == openai_chat.decode(body({"content": None, "refusal": "".join(pieces)}))
    assert result.stop is ModelStop.refusal


def test_stream_joins_a_character_split_between_its_utf16_code_units() -> None:
    acc = openai_chat.StreamAccumulator()
    assert acc.feed(chunk({"content": "晴\ud83d"})) == [TextDelta(0, "晴")]
    assert acc.feed(chunk({"content": "\ude00!"})) == [TextDelta(0, "😀!")]
    acc.feed(chunk({}, "stop"))
    assert acc.result().content == [Text("晴😀!")]


@pytest.mark.parametrize(
    ("broken", "path"),
    [
        ({"id": "x", "object": "chat.completion.chunk"}, "choices"),
        (
            chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{"}}]}),
            "choices[0].delta.tool_calls[0].id",
        ),
        (
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": "{"}}]}),
            "choices[0].delta.tool_calls[0].function.name",
        ),
        (
            chunk({"tool_calls": [{"id": "call_a", "function": {"name": "f"}}]}),
            "choices[0].delta.tool_calls[0].index",
        ),
        (chunk({"content": ["x"]}), "choices[0].delta.content"),
        (chunk({"function_call": {"name": "f"}}), "choices[0].delta.function_call"),
        (chunk({}, 7), "choices[0].finish_reason"),  # type: ignore[arg-type]
    ],
)
def test_stream_errors_name_the_path(broken: dict[str, Any], path: str) -> None:
    with pytest.raises(DecodeError) as caught:
        openai_chat.StreamAccumulator().feed(broken)
    assert caught.value.path == path


def test_stream_a_second_id_at_one_index_is_refused() -> None:
    acc = openai_chat.StreamAccumulator()
    acc.feed(chunk({"tool_calls": [opening(0, "call_a", "f", "{")]}))
    with pytest.raises(DecodeError) as caught:
        acc.feed(chunk({"tool_calls": [{**more(0, "}"), "id": "call_b"}]}))
    assert caught.value.path == "choices[0].delta.tool_calls[0].id"


# -- the property: a stream split anywhere gives what decode gives --------------------------------


def utf16_split(text: str, cuts: list[int]) -> list[str]:
    """`text` cut between any UTF-16 code units (so inside an astral character too)."""
    units = text.encode("utf-16-le", "surrogatepass")
    bounds = sorted({0, len(units) // 2, *(c % (len(units) // 2 + 1) for c in cuts)})
    pieces = [
        units[2 * a : 2 * b].decode("utf-16-le", "surrogatepass")
        for a, b in itertools.pairwise(bounds)
    ]
    return pieces or [""]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
arguments_text = st.one_of(
    st.builds(
        lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only),
        st.dictionaries(st.text(), json_values, max_size=4),
        st.booleans(),
    ),
    st.just('{"q":"说 \\"上\\" \\u4e0a 😀","n":1}'),
    st.text(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(),
    refusal=st.text(max_size=8),
    arguments=st.lists(arguments_text, max_size=3),
    finish=st.sampled_from(["stop", "tool_calls", "length", "content_filter", "weird"]),
    prompt_tokens=st.integers(0, 10**6),
    data=st.data(),
)
def test_stream_split_anywhere_equals_decode(
    text: str,
    refusal: str,
    arguments: list[str],
    finish: str,
    prompt_tokens: int,
    data: st.DataObject,
) -> None:
    cuts = st.lists(st.integers(0, 10**4), max_size=6)
    names = [f"tool_{i}" for i in range(len(arguments))]
    ids = [f"call_{i}x" for i in range(len(arguments))]
    queues = []
    for i, args in enumerate(arguments):
        head, *tail = utf16_split(args, data.draw(cuts))
        queues.append([opening(i, ids[i], names[i], head), *(more(i, p) for p in tail)])
    fragments: list[dict[str, Any]] = []
    started = 0
    while any(queues):
        ready = [i for i, q in enumerate(queues) if q and i <= started]
        i = data.draw(st.sampled_from(ready))
        started = max(started, i + 1)
        fragments.append(queues[i].pop(0))

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": p}) for p in utf16_split(text, data.draw(cuts))]
    chunks += [chunk({"refusal": p}) for p in utf16_split(refusal, data.draw(cuts))]
    while fragments:
        size = data.draw(st.integers(1, 3))
        chunks.append(chunk({"tool_calls": fragments[:size]}))
        del fragments[:size]
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 7,
        "total_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
    }
    chunks += [chunk({}, finish), chunk(None, usage=usage)]

    whole = body(
        {
            "content": text or None,
            "refusal": refusal or None,
            "tool_calls": [fn(ids[i], names[i], a) for i, a in enumerate(arguments)] or None,
        },
        finish,
        usage,
    )
    deltas, result = accumulate(chunks)
    assert result == openai_chat.decode(whole)
    texts = [d for d in deltas if type(d) is TextDelta]
    assert "".join(d.text for d in texts) == text + refusal
    assert all(type(result.content[d.index]) is Text for d in texts)
    for i, args in enumerate(arguments):
        mine = [d for d in deltas if type(d) is ArgumentsDelta and d.call_id == ids[i]]
        assert "".join(d.fragment for d in mine) == args
        for d in mine:
            part = result.content[d.index]
            assert type(part) is ToolCall and (part.id, part.name) == (ids[i], names[i])


# -- round trip ----------------------------------------------------------------------------------


def test_round_trip_keeps_ids_and_compact_argument_strings_byte_equal() -> None:
    """Arguments go back re-encoded from the dict: byte-equal when the model wrote compact JSON."""
    wire = load("weather.json")["exchanges"][0]["response"]["body"]["choices"][0]["message"]
    reply = AssistantMessage(openai_chat.decode(body(wire, "tool_calls")).content)
    resent = wire_messages(UserMessage("北京和上海哪个更暖和?"), reply)[1]
    assert resent["tool_calls"] == wire["tool_calls"]
    assert resent["content"] == wire["content"]


def test_round_trip_normalises_spaced_json_and_keeps_raw_text_verbatim() -> None:
    sent = [
        fn("call_a", "f", '{"city": "北京", "days": 2}'),
        fn("call_b", "f", '{"q": "\\u4e0a\\"x\\""}'),
        fn("call_c", "f", '{"city":"北京"}{"city":"上海"}'),
    ]
    reply = AssistantMessage(openai_chat.decode(body({"tool_calls": sent})).content)
    resent = wire_messages(UserMessage("q"), reply)[1]["tool_calls"]
    assert [c["id"] for c in resent] == ["call_a", "call_b", "call_c"]
    assert [c["function"]["arguments"] for c in resent] == [
        '{"city":"北京","days":2}',
        '{"q":"上\\"x\\""}',
        '{"city":"北京"}{"city":"上海"}',
    ]
    for before, after in zip(sent[:2], resent[:2], strict=True):
        assert json.loads(after["function"]["arguments"]) == json.loads(
            before["function"]["arguments"]
        )


# -- fixtures ------------------------------------------------------------------------------------

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))

# Where a hand-written response deliberately leaves the SDK's types, and exactly how.
AZURE_FIRST_CHUNK = {("object", "literal_error")}  # Azure sends "object": ""
OFF_SDK_TYPES = {"unknown_stop.json": {("choices.0.finish_reason", "literal_error")}}


def sdk_errors(model: type[pydantic.BaseModel], data: dict[str, Any]) -> set[tuple[str, str]]:
    try:
        model.model_validate(data)
    except pydantic.ValidationError as e:
        return {(".".join(map(str, err["loc"])), err["type"]) for err in e.errors()}
    return set()


def test_the_fixture_set_is_complete() -> None:
    assert FIXTURE_NAMES == sorted(
        [
            "audio.json",
            "azure_prompt_filter.stream.json",
            "cache_off.json",
            "client_history.json",
            "content_filter.json",
            "instructions.json",
            "malformed_args.json",
            "max_tokens_field.json",
            "max_tokens_tool.stream.json",
            "media.json",
            "output_native.json",
            "output_native.stream.json",
            "output_tool.json",
            "output_tool.stream.json",
            "overloaded.stream.json",
            "refusal.json",
            "tool_error.json",
            "unknown_stop.json",
            "weather.json",
            "weather.stream.json",
            "web_search.json",
        ]
    )


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_responses_validate_against_the_sdk_types(name: str) -> None:
    trace = load(name)
    assert (trace["format"], trace["provider"], trace["hand_written"]) == (
        "turnstile-trace/1",
        "openai-chat",
        True,
    )
    assert trace["description"] and trace["covers"]
    assert name.endswith(".stream.json") == trace["loop"]["stream"]
    for exchange in trace["exchanges"]:
        response = exchange["response"]
        assert set(response["headers"]) == {"content-type", "x-request-id"}
        if "body" in response:
            assert response["headers"]["content-type"] == "application/json"
            assert sdk_errors(ChatCompletion, response["body"]) == OFF_SDK_TYPES.get(name, set())
            continue
        sse = response["sse"]
        assert response["headers"]["content-type"].startswith("text/event-stream")
        blocks = sse.split("\n\n")
        assert blocks[-1] == "" and all(b.startswith("data: ") for b in blocks[:-1])
        chunks = sse_chunks(sse)
        if "error" in chunks[-1]:
            # The stream ends on the error: no [DONE] follows it.
            assert set(chunks[-1]) == {"error"}
            ErrorObject.model_validate(chunks[-1]["error"])
            assert len(chunks) == len(blocks) - 1
            chunks = chunks[:-1]
        else:
            assert blocks[-2] == "data: [DONE]"
        for c in chunks:
            expected = AZURE_FIRST_CHUNK if "prompt_filter_results" in c else set()
            assert sdk_errors(ChatCompletionChunk, c) == expected


# How each trace's loop ends, and its total usage.
OUTCOMES = {
    "audio.json": (StopReason.completed, Usage(24, 13)),
    "azure_prompt_filter.stream.json": (StopReason.completed, Usage(19, 21)),
    "cache_off.json": (StopReason.completed, Usage(21, 6)),
    "client_history.json": (StopReason.completed, Usage(231, 41, reasoning_tokens=16)),
    "content_filter.json": (StopReason.refusal, Usage(41, 0)),
    "instructions.json": (StopReason.completed, Usage(78, 75, reasoning_tokens=64)),
    "malformed_args.json": (StopReason.completed, Usage(512 + 598 + 702, 24 + 46 + 130)),
    "max_tokens_field.json": (StopReason.completed, Usage(22, 24)),
    "max_tokens_tool.stream.json": (StopReason.max_turns, Usage(377 + 561, 60 + 88)),
    "media.json": (StopReason.completed, Usage(1164 + 1196, 17 + 6, cache_read_tokens=1152)),
    "output_native.json": (StopReason.completed, Usage(96 + 163, 19 + 14)),
    "output_native.stream.json": (StopReason.completed, Usage(182, 21)),
    "output_tool.json": (StopReason.finish_tool, Usage(402 + 448 + 531, 21 + 31 + 29)),
    "output_tool.stream.json": (StopReason.finish_tool, Usage(182, 21)),
    "overloaded.stream.json": (StopReason.completed, Usage(52, 27)),
    "refusal.json": (StopReason.refusal, Usage(98, 31)),
    "tool_error.json": (StopReason.completed, Usage(420 + 468, 17 + 64)),
    "unknown_stop.json": (StopReason.completed, Usage(84, 9, cache_read_tokens=64)),
    "weather.json": (StopReason.completed, Usage(805, 251)),
    "weather.stream.json": (StopReason.completed, Usage(805, 251)),
    "web_search.json": (StopReason.completed, Usage(312, 38)),
}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_replays_through_the_loop_with_the_recorded_requests(name: str) -> None:
    trace = load(name)
    section = trace["loop"]
    recorded = Trace.load(FIXTURES / name)
    spec = spec_for(recorded)  # the trace's system, tools, guards, caching, answer type
    options = dict(section.get("options", {}))
    if section["stream"]:
        options["stream"] = True
    loop = Loop(spec)
    exchanges = list(trace["exchanges"])
    pending = loop.start(prompt_for(recorded), 0.0)
    finish = None
    while pending:
        command = pending.pop(0)
        if type(command) is Finish:
            finish = command
        elif type(command) is RunTool:
            out = section["tool_outputs"][command.id]
            content = msgspec.convert(out["content"], str | list[ResultPart])
            returned = ToolReturned(
                call_id=command.id, content=content, is_error=out["is_error"], now=1.0
            )
            pending += loop.send(returned)
        else:
            assert type(command) is CallModel
            exchange = exchanges.pop(0)
            assert exchange["request"]["method"] == "POST"
            assert exchange["request"]["path"] == "/v1/chat/completions"
            encoded = openai_chat.encode(command.request, model=section["model"], **options)
            assert encoded == exchange["request"]["body"]
            response = exchange["response"]
            try:
                if "sse" in response:
                    reply = accumulate(sse_chunks(response["sse"]))[1]
                else:
                    reply = openai_chat.decode(response["body"])
            except ProviderError as e:
                observed: Any = ModelFailed(
                    command_id=command.id, message=str(e), retryable=e.retryable, now=1.0
                )
            else:
                observed = ModelReplied(command_id=command.id, response=reply, now=1.0)
            pending += loop.send(observed)
    assert exchanges == []
    assert finish is not None
    assert (finish.reason, loop.state.usage) == OUTCOMES[name]


# -- encoding a growing history: each call reuses what the last one encoded ---------------------

from turnstile.core.messages import History, Message  # noqa: E402
from turnstile.providers import WireCache  # noqa: E402

CACHE_PARTS = st.one_of(
    st.builds(Text, st.sampled_from(["", "看看"])),
    st.builds(Thinking, st.just("想"), signature=st.just("sig")),
    st.builds(
        ToolCall,
        st.sampled_from(["call_1", "call_2"]),
        st.just("get_weather"),
        st.fixed_dictionaries({"city": st.sampled_from(["北京", "上海"])}),
        raw_arguments=st.sampled_from([None, '{"city": "北']),
    ),
)
CACHE_MESSAGES = st.one_of(
    st.builds(UserMessage, st.sampled_from(["q", "继续"])),
    st.builds(AssistantMessage, st.lists(CACHE_PARTS, max_size=3)),
    st.builds(
        ToolResults,
        st.lists(st.builds(ToolResult, st.sampled_from(["call_1", "call_2"]), st.just("ok"))),
    ),
)


def whole_body(messages: list[Message], system: str | None = "s") -> dict[str, Any]:
    """The body of a plain list of messages, which is never cached: the reference."""
    return openai_chat.encode(ModelRequest(system, list(messages), (), 100), model="m")


def view_body(
    ledger: list[Message], n: int, cache: WireCache, system: str | None = "s"
) -> dict[str, Any]:
    """The body of the first `n` messages of `ledger` as a client sends them (a `History`)."""
    request = ModelRequest(system, History(ledger, n), (), 100)
    return openai_chat.encode(request, model="m", cache=cache)


@settings(max_examples=150, deadline=None)
@given(ledger=st.lists(CACHE_MESSAGES, max_size=8), data=st.data())
def test_views_of_a_history_encode_as_the_whole_list_in_any_order(
    ledger: list[Message], data: st.DataObject
) -> None:
    views = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(ledger)), st.sampled_from([None, "s", "t"])), min_size=1
        )
    )
    cache = WireCache()
    for n, system in views:
        assert view_body(ledger, n, cache, system) == whole_body(ledger[:n], system)


def test_a_caller_changing_a_body_s_own_containers_leaves_the_next_body_alone() -> None:
    call = ToolCall("call_1", "get_weather", {"city": "北京"})
    ledger: list[Message] = [UserMessage("q"), AssistantMessage([call])]
    cache = WireCache()
    body = view_body(ledger, 2, cache)
    body["messages"].append({"role": "user", "content": "injected"})
    del body["messages"][:2]
    ledger.append(ToolResults([ToolResult(call.id, "26")]))
    assert view_body(ledger, 3, cache) == whole_body(ledger)
    assert view_body(ledger, 2, cache) == whole_body(ledger[:2])


# -- a stream that ends with [DONE] but never says why -------------------------------------------


def read_stream(chunks: list[dict[str, Any]], *, done: bool) -> ModelResponse:
    """The reply the client reads from `chunks` sent as an event stream, with or without the
    closing `data: [DONE]`."""
    sse = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)
    reader = StreamReader(openai_chat.Client.wire)
    reader.feed((sse + ("data: [DONE]\n\n" if done else "")).encode())
    return reader.result()


def without_finish_reason(chunks: list[dict[str, Any]]) -> list[ModelResponse]:
    """The reply the codec reads from `chunks`, and the client with and without `[DONE]`."""
    return [accumulate(chunks)[1], read_stream(chunks, done=True), read_stream(chunks, done=False)]


def test_a_stream_that_ends_without_a_finish_reason_is_judged_by_its_content() -> None:
    """Some gateways (OpenRouter for some upstreams) send no finish_reason: a stream that ended
    holding whole calls is tool_use, one holding text alone end_turn, in every path."""
    calls = [
        chunk({"role": "assistant", "content": "查一下。"}),
        chunk({"tool_calls": [opening(0, "call_a", "get_weather", '{"city": ')]}),
        chunk({"tool_calls": [more(0, '"北京"}')]}),
        chunk({"tool_calls": [opening(1, "call_b", "get_weather")]}),
        chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5}),
    ]
    assert without_finish_reason(calls) == 3 * [
        ModelResponse(
            [
                Text("查一下。"),
                ToolCall("call_a", "get_weather", {"city": "北京"}),
                ToolCall("call_b", "get_weather", {}),
            ],
            ModelStop.tool_use,
            Usage(10, 5),
            id="chatcmpl-test",
            model="gpt-4o",
        )
    ]
    text = without_finish_reason([chunk({"content": "上海更暖和。"})])
    assert [(r.content, r.stop) for r in text] == 3 * [([Text("上海更暖和。")], ModelStop.end_turn)]


@pytest.mark.parametrize(
    "chunks",
    [
        [chunk({"tool_calls": [opening(0, "call_a", "get_weather", '{"city": "北')]})],
        [chunk({"role": "assistant"}), chunk(None, usage={"prompt_tokens": 3})],
        [],
    ],
    ids=["a call cut short", "nothing said", "no chunk"],
)
def test_a_stream_without_a_finish_reason_that_is_cut_or_empty_is_incomplete(
    chunks: list[dict[str, Any]],
) -> None:
    acc = openai_chat.StreamAccumulator()
    for c in chunks:
        acc.feed(c)
    for result in (acc.result, lambda: read_stream(chunks, done=True)):
        with pytest.raises(ProviderError) as raised:
            result()
        assert (raised.value.kind, raised.value.retryable) == ("incomplete_stream", True)


def test_recorded_tools_find_the_calls_of_a_stream_that_ended_with_done_alone() -> None:
    calls = [chunk({"tool_calls": [opening(0, "call_a", "get_weather", '{"city": "北京"}')]})]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in calls) + "data: [DONE]\n\n"
    trace = msgspec.convert(
        {
            "provider": "openai-chat",
            "hand_written": True,
            "loop": {
                "model": "m",
                "prompt": "北京呢?",
                "stream": True,
                "tool_outputs": {"call_a": {"content": "26°C"}},
            },
            "exchanges": [
                {
                    "request": {"method": "POST", "path": "/v1/chat/completions", "body": {}},
                    "response": {"status": 200, "sse": sse},
                }
            ],
        },
        Trace,
    )
    tools = RecordedTools(trace)
    assert tools.run("get_weather", {"city": "北京"}).content == "26°C"
    assert tools.unrecorded == []
