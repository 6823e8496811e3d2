"""The OpenAI Responses codec: encode, decode, the stream accumulator, and the recorded traces."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseOutputItem, ResponseStreamEvent
from pydantic import TypeAdapter
from turnstile.core import (
    CallModel,
    Finish,
    Guards,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    StopReason,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
)
from turnstile.core.request import Purpose
from turnstile.providers._deltas import ArgumentsDelta, TextDelta, ThinkingDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._sse import events_json
from turnstile.providers.openai_responses import StreamAccumulator, decode, encode

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openai-responses"
TRACES = sorted(p.name for p in FIXTURES.glob("*.json"))
EVENT = TypeAdapter(ResponseStreamEvent)
OUTPUT_ITEM = TypeAdapter(ResponseOutputItem)
WEATHER = ToolSpec(
    "get_weather",
    "查询城市的实时天气",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "城市名,例如 北京"}},
        "required": ["city"],
    },
)


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def sse_events(text: str) -> list[dict[str, Any]]:
    """The JSON `data` of each event in an `event: X\ndata: {...}\n\n` stream."""
    return events_json(text)


def accumulate(events: list[dict[str, Any]]) -> tuple[StreamAccumulator, list[Any]]:
    acc = StreamAccumulator()
    deltas = [d for event in events for d in acc.feed(event)]
    return acc, deltas


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def body(output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A minimal Response object around `output`."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1764680000,
        "status": "completed",
        "model": "gpt-5.1",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
        **fields,
    }


def message(text: str, *, mid: str = "msg_1", kind: str = "output_text") -> dict[str, Any]:
    field = "text" if kind == "output_text" else "refusal"
    part = {"type": kind, field: text}
    if kind == "output_text":
        part["annotations"] = []
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def function_call(call_id: str | None, arguments: str, *, fid: str = "fc_1", **more: Any) -> dict:
    item = {"id": fid, "type": "function_call", "name": "get_weather", "arguments": arguments}
    if call_id is not None:
        item["call_id"] = call_id
    return {"status": "completed", **item, **more}


def reasoning(rid: str = "rs_1", *summaries: str) -> dict[str, Any]:
    return {
        "id": rid,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": s} for s in summaries],
        "encrypted_content": f"gAAAA-{rid}",
    }


def request(*messages: Any, tools: tuple[ToolSpec, ...] = (WEATHER,), system: str | None = None):
    return ModelRequest(system, list(messages), tools, 1024)


# -- the recorded traces -------------------------------------------------------------------------


def test_the_traces_are_the_ones_promised() -> None:
    assert TRACES == [
        "background_resumed.stream.json",
        "cache_off.json",
        "instructions.json",
        "malformed_args.json",
        "max_tokens_tool.stream.json",
        "media.json",
        "output_native.json",
        "output_native.stream.json",
        "output_tool.json",
        "output_tool.stream.json",
        "overloaded.stream.json",
        "reasoning.json",
        "refusal.json",
        "stored.json",
        "tool_error.json",
        "tool_search.json",
        "unknown_stop.json",
        "weather.json",
        "weather.stream.json",
        "web_search.stream.json",
    ]


@pytest.mark.parametrize("name", TRACES)
def test_every_recorded_response_validates_against_the_sdk_types(name: str) -> None:
    trace = load(name)
    assert trace["format"] == "turnstile-trace/1"
    assert trace["provider"] == "openai-responses"
    assert trace["hand_written"] is True
    assert trace["exchanges"]
    for exchange in trace["exchanges"]:
        request = exchange["request"]
        if request["method"] == "GET":  # the rest of a background stream
            assert request["path"].startswith("/v1/responses/resp_")
        else:
            assert request["path"] == "/v1/responses"
        response = exchange["response"]
        assert name.endswith(".stream.json") == ("sse" in response)
        if "body" in response:
            Response.model_validate(response["body"])
            continue
        for frame in response["sse"].split("\n\n")[:-1]:
            event_line, data_line = frame.split("\n")
            event = json.loads(data_line.removeprefix("data: "))
            assert event_line == f"event: {event['type']}"
            EVENT.validate_python(event)


def reply_of(response: dict[str, Any]) -> ModelResponse:
    if "body" in response:
        return decode(response["body"])
    acc, _ = accumulate(sse_events(response["sse"]))
    return acc.result()


def replay(trace: dict[str, Any]) -> tuple[StopReason, int]:
    """Runs the loop over the trace with the codec alone: each request must equal the recorded
    one. Returns how the run finished and how many exchanges it used."""
    setup = trace["loop"]
    spec = LoopSpec(
        system=setup["system"],
        tools=tuple(msgspec.convert(t, ToolSpec) for t in setup["tools"]),
        guards=msgspec.convert(setup.get("guards", {}), Guards),
        max_tokens=setup["max_tokens"],
    )
    options = {"stream": True} if setup["stream"] else {}
    loop = Loop(spec)
    commands = loop.start(setup["prompt"], 0.0)
    used = 0
    while True:
        follow: list[Any] = []
        for command in commands:
            if type(command) is Finish:
                return command.reason, used
            if type(command) is CallModel:
                exchange = trace["exchanges"][used]
                used += 1
                sent = encode(command.request, model=setup["model"], **options)
                assert sent == exchange["request"]["body"], f"request {used} differs"
                try:
                    reply = reply_of(exchange["response"])
                except ProviderError as e:
                    failed = ModelFailed(
                        now=0.0, command_id=command.id, message=str(e), retryable=e.retryable
                    )
                    follow += loop.send(failed)
                else:
                    follow += loop.send(
                        ModelReplied(now=0.0, command_id=command.id, response=reply)
                    )
            else:
                out = setup["tool_outputs"][command.id]
                follow += loop.send(
                    ToolReturned(
                        now=0.0,
                        call_id=command.id,
                        content=out["content"],
                        is_error=out["is_error"],
                    )
                )
        commands = follow


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("malformed_args.json", StopReason.completed),
        ("max_tokens_tool.stream.json", StopReason.completed),
        ("overloaded.stream.json", StopReason.completed),
        ("reasoning.json", StopReason.completed),
        ("refusal.json", StopReason.refusal),
        ("tool_error.json", StopReason.completed),
        ("unknown_stop.json", StopReason.completed),
        ("weather.json", StopReason.completed),
        ("weather.stream.json", StopReason.completed),
    ],
)
def test_the_loop_replays_each_trace_request_by_request(name: str, reason: StopReason) -> None:
    trace = load(name)
    assert replay(trace) == (reason, len(trace["exchanges"]))


@pytest.mark.parametrize("name", ["weather.json", "weather.stream.json"])
def test_the_seed_conversation_decodes_as_recorded(name: str) -> None:
    first, second = (reply_of(e["response"]) for e in load(name)["exchanges"])
    assert first.stop is ModelStop.tool_use
    assert first.usage == Usage(512, 121)
    assert first.content[0] == Text("我来帮您查询北京和上海的实时天气。")
    calls = first.content[1:]
    assert [(c.name, c.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "北京"}),
        ("get_weather", {"city": "上海"}),
    ]
    assert all(c.id.startswith("call_") for c in calls)  # type: ignore[union-attr]
    assert all(c.provider_data["id"].startswith("fc_") for c in calls)  # type: ignore[union-attr]
    assert second.stop is ModelStop.end_turn
    assert second.usage == Usage(293, 130)
    assert "上海更暖和" in second.content[0].text  # type: ignore[union-attr]
    assert first.usage + second.usage == Usage(805, 251)


@pytest.mark.parametrize("name", [n for n in TRACES if n.endswith(".stream.json")])
def test_a_stream_result_equals_decoding_its_terminal_response(name: str) -> None:
    """A stream cut before its terminal event counts with the rest, asked for afterwards."""
    cut: list[dict[str, Any]] = []
    for exchange in load(name)["exchanges"]:
        events = cut + sse_events(exchange["response"]["sse"])
        terminal = events[-1]
        if terminal["type"] == "error":
            continue
        if not terminal["type"].startswith(("response.completed", "response.incomplete")):
            cut = events
            continue
        cut = []
        acc, _ = accumulate(events)
        assert acc.result() == decode(terminal["response"])


def test_the_cut_call_in_a_stream_is_incomplete_and_keeps_its_partial_arguments() -> None:
    exchange = load("max_tokens_tool.stream.json")["exchanges"][0]
    acc, deltas = accumulate(sse_events(exchange["response"]["sse"]))
    result = acc.result()
    assert result.stop is ModelStop.max_tokens
    call = result.content[1]
    assert type(call) is ToolCall
    assert (call.complete, call.arguments, call.raw_arguments) == (False, {}, '{"city":"上')
    fragments = [d for d in deltas if type(d) is ArgumentsDelta]
    assert "".join(d.fragment for d in fragments) == '{"city":"上'
    assert {(d.index, d.call_id, d.name) for d in fragments} == {
        (1, "call_K4jH7gF0dS3aL6kJ9hG2fD5s", "get_weather")
    }


def test_an_overloaded_error_event_after_http_200_is_retryable() -> None:
    exchange = load("overloaded.stream.json")["exchanges"][0]
    acc = StreamAccumulator()
    shown = []
    with pytest.raises(ProviderError) as raised:
        for event in sse_events(exchange["response"]["sse"]):
            shown += acc.feed(event)
    assert raised.value.kind == "server_is_overloaded"
    assert raised.value.retryable is True
    assert "overloaded" in raised.value.message
    assert shown == [TextDelta(0, "上海是"), TextDelta(0, "中国")]
    with pytest.raises(ProviderError) as again:
        acc.result()
    assert again.value is raised.value


@pytest.mark.parametrize("name", ["reasoning.json", "weather.json"])
def test_a_decoded_reply_goes_back_byte_equal_in_the_next_request(name: str) -> None:
    trace = load(name)
    output = trace["exchanges"][0]["response"]["body"]["output"]
    reply = decode(trace["exchanges"][0]["response"]["body"])
    calls = [p for p in reply.content if type(p) is ToolCall]
    results = ToolResults([ToolResult(c.id, "{}") for c in calls])
    sent = encode(
        request(UserMessage("北京和上海哪个更暖和?"), AssistantMessage(reply.content), results),
        model="gpt-5-mini",
    )["input"]
    kinds = ("reasoning", "function_call")
    assert [i["type"] for i in sent if i["type"] in kinds] == [
        i["type"] for i in output if i["type"] in kinds
    ]
    for out, back in zip(
        (i for i in output if i["type"] == "reasoning"),
        (i for i in sent if i["type"] == "reasoning"),
        strict=True,
    ):
        assert canonical(back) == canonical(out)
    for out, back in zip(
        (i for i in output if i["type"] == "function_call"),
        (i for i in sent if i["type"] == "function_call"),
        strict=True,
    ):
        assert (back["call_id"], back["id"], back["arguments"], back["name"]) == (
            out["call_id"],
            out["id"],
            out["arguments"],
            out["name"],
        )


def test_reasoning_items_go_back_right_before_their_function_calls() -> None:
    second = load("reasoning.json")["exchanges"][1]["request"]["body"]["input"]
    assert [i["type"] for i in second] == [
        "message",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert second[1]["encrypted_content"].startswith("gAAAAA")


# -- encode --------------------------------------------------------------------------------------


def test_encode_defaults_to_a_stateless_request() -> None:
    sent = encode(request(UserMessage("你好"), system="简短回答。"), model="gpt-5.1")
    assert sent == {
        "model": "gpt-5.1",
        "instructions": "简短回答。",
        "input": [{"type": "message", "role": "user", "content": "你好"}],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "查询城市的实时天气",
                "parameters": WEATHER.parameters,
                "strict": False,
            }
        ],
        "max_output_tokens": 1024,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


def test_encode_omits_instructions_without_a_system_prompt_and_tools_when_there_are_none() -> None:
    sent = encode(request(UserMessage("你好"), tools=()), model="gpt-5.1")
    assert "instructions" not in sent
    assert "tools" not in sent


def test_encode_leaves_out_an_empty_tool_description() -> None:
    sent = encode(request(UserMessage("x"), tools=(ToolSpec("ping"),)), model="m")
    assert sent["tools"] == [
        {
            "type": "function",
            "name": "ping",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]


def test_encode_merges_options_and_none_removes_a_default() -> None:
    sent = encode(
        request(UserMessage("x")),
        model="gpt-4.1",
        stream=True,
        reasoning={"effort": "low"},
        include=None,
        store=True,
    )
    assert sent["stream"] is True
    assert sent["reasoning"] == {"effort": "low"}
    assert sent["store"] is True
    assert "include" not in sent


def test_encode_puts_a_reply_in_order_and_joins_adjacent_texts() -> None:
    item = reasoning("rs_9", "先想一下")
    reply = AssistantMessage(
        [
            Thinking("先想一下", provider_data=item),
            Text("第一段"),
            Text("第二段"),
            ToolCall("call_1", "get_weather", {"city": "北京"}, provider_data={"id": "fc_1"}),
            Text("最后"),
        ]
    )
    results = ToolResults([ToolResult("call_1", "晴")])
    sent = encode(request(UserMessage("q"), reply, results), model="m")["input"]
    assert sent == [
        {"type": "message", "role": "user", "content": "q"},
        item,
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "第一段"},
                {"type": "output_text", "text": "第二段"},
            ],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"北京"}',
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "最后"}],
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "晴"},
    ]
    assert sent[1] is not item


def test_encode_drops_thinking_it_cannot_send_and_empty_text() -> None:
    reply = AssistantMessage(
        [
            Thinking("另一家的思考", signature="sig"),
            Thinking("", redacted=True, provider_data={"type": "redacted_thinking"}),
            Text(""),
            ToolCall("call_1", "get_weather", {}),
        ]
    )
    results = ToolResults([ToolResult("call_1", "ok")])
    sent = encode(request(UserMessage("q"), reply, results), model="m")["input"]
    assert [i["type"] for i in sent] == ["message", "function_call", "function_call_output"]
    assert sent[1] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": "{}",
    }


def test_encode_sends_the_arguments_text_the_model_wrote() -> None:
    kept = ToolCall(
        "call_1",
        "get_weather",
        {"city": "北京"},
        provider_data={"id": "fc_1", "arguments": '{ "city" : "北京" }'},
    )
    edited = msgspec.structs.replace(kept, arguments={"city": "上海"})
    raw = ToolCall("call_2", "get_weather", {}, raw_arguments='{"city": "北', complete=False)
    empty = ToolCall("call_3", "get_weather", {}, provider_data={"arguments": ""})
    reply = AssistantMessage([kept, edited, raw, empty])
    sent = encode(request(UserMessage("q"), reply), model="m")["input"][1:]
    assert [i["arguments"] for i in sent] == [
        '{ "city" : "北京" }',
        '{"city":"上海"}',
        '{"city": "北',
        "",
    ]


def test_encode_sends_tool_results_one_item_each_and_a_final_user_message_after_them() -> None:
    reply = AssistantMessage(
        [ToolCall("call_a", "get_weather", {"city": "北京"}), ToolCall("call_b", "get_weather", {})]
    )
    results = ToolResults(
        [
            ToolResult("call_a", '{"温度":26}'),
            ToolResult("call_b", "get_weather failed: TimeoutError", is_error=True),
        ]
    )
    finalize = ModelRequest(
        None,
        [UserMessage("q"), reply, results, UserMessage("现在回答。")],
        (),
        64,
        Purpose.finalize,
    )
    sent = encode(finalize, model="m")
    assert "tools" not in sent
    assert sent["input"][3:] == [
        {"type": "function_call_output", "call_id": "call_a", "output": '{"温度":26}'},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": "get_weather failed: TimeoutError",
        },
        {"type": "message", "role": "user", "content": "现在回答。"},
    ]


# -- decode --------------------------------------------------------------------------------------


def test_decode_reads_reasoning_text_and_calls_in_order() -> None:
    item = reasoning("rs_1", "第一步", "第二步")
    raw = body([item, message("好的"), function_call("call_9", '{"city":"北京"}', fid="fc_9")])
    reply = decode(raw)
    assert reply == ModelResponse(
        [
            Thinking("第一步\n\n第二步", provider_data=item),
            Text("好的"),
            ToolCall(
                "call_9",
                "get_weather",
                {"city": "北京"},
                provider_data={"id": "fc_9", "arguments": '{"city":"北京"}'},
            ),
        ],
        ModelStop.tool_use,
        Usage(10, 5),
        id="resp_1",
        model="gpt-5.1",
    )
    item["summary"].clear()
    assert reply.content[0].provider_data["summary"]  # type: ignore[union-attr]


def test_decode_keeps_extra_function_call_fields_for_the_way_back() -> None:
    raw = body([function_call("call_1", "{}", namespace="weather", caller={"type": "direct"})])
    call = decode(raw).content[0]
    assert call.provider_data == {  # type: ignore[union-attr]
        "id": "fc_1",
        "arguments": "{}",
        "namespace": "weather",
        "caller": {"type": "direct"},
    }
    back = encode(request(UserMessage("q"), AssistantMessage([call])), model="m")["input"][1]
    assert back == {
        "type": "function_call",
        "id": "fc_1",
        "namespace": "weather",
        "caller": {"type": "direct"},
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": "{}",
    }


def test_a_refusal_is_text_with_stop_refusal() -> None:
    reply = decode(body([message("抱歉,我不能帮忙。", kind="refusal")]))
    assert reply.content == [Text("抱歉,我不能帮忙。")]
    assert reply.stop is ModelStop.refusal
    assert (
        decode(load("refusal.json")["exchanges"][0]["response"]["body"]).stop is ModelStop.refusal
    )


@pytest.mark.parametrize(
    ("arguments", "parsed", "raw"),
    [
        ('{"city": "北京"', {}, '{"city": "北京"'),
        ('["北京"]', {}, '["北京"]'),
        ("", {}, None),
        ('{"n": 1, "tags": ["a"]}', {"n": 1, "tags": ["a"]}, None),
    ],
)
def test_invalid_arguments_are_kept_as_raw_text(
    arguments: str, parsed: dict, raw: str | None
) -> None:
    call = decode(body([function_call("call_1", arguments)])).content[0]
    assert (call.arguments, call.raw_arguments, call.complete) == (parsed, raw, True)  # type: ignore[union-attr]


def test_the_malformed_trace_decodes_to_raw_arguments() -> None:
    reply = reply_of(load("malformed_args.json")["exchanges"][0]["response"])
    call = reply.content[0]
    assert type(call) is ToolCall
    assert (call.arguments, call.raw_arguments) == ({}, '{"city": "北京"')


@pytest.mark.parametrize("call_id", [None, ""])
def test_a_function_call_without_call_id_is_a_decode_error(call_id: str | None) -> None:
    raw = body([reasoning(), message("x"), function_call(call_id, "{}")])
    with pytest.raises(DecodeError) as raised:
        decode(raw)
    assert raised.value.path == "output[2].call_id"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ([], ""),
        ({"output": []}, "status"),
        ({"status": "completed"}, "output"),
        ({"status": "completed", "output": ["x"]}, "output[0]"),
        ({"status": "completed", "output": [{"type": "message", "id": "m"}]}, "output[0].content"),
        (
            {
                "status": "completed",
                "output": [{"type": "message", "content": [{"type": "output_text"}]}],
            },
            "output[0].content[0].text",
        ),
        ({"status": "completed", "output": [{"type": "reasoning", "summary": []}]}, "output[0].id"),
        (
            {"status": "completed", "output": [{"type": "reasoning", "id": "rs"}]},
            "output[0].summary",
        ),
        (
            {"status": "completed", "output": [{"type": "reasoning", "id": "rs", "summary": [{}]}]},
            "output[0].summary[0].text",
        ),
        ({"status": "completed", "output": [function_call("c", None)]}, "output[0].arguments"),  # type: ignore[arg-type]
        (
            {
                "status": "completed",
                "output": [{"type": "function_call", "call_id": "c", "arguments": "{}"}],
            },
            "output[0].name",
        ),
        (
            {"status": "completed", "output": [], "usage": {"output_tokens": 1}},
            "usage.input_tokens",
        ),
        (
            {
                "status": "completed",
                "output": [],
                "usage": {"input_tokens": 1, "output_tokens": "2"},
            },
            "usage.output_tokens",
        ),
        ({"status": "completed", "output": [], "usage": []}, "usage"),
    ],
)
def test_a_body_missing_what_it_needs_is_a_decode_error(raw: Any, path: str) -> None:
    with pytest.raises(DecodeError) as raised:
        decode(raw)
    assert raised.value.path == path


def test_output_items_of_other_kinds_are_kept_verbatim() -> None:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed"}
    raw = body([search, message("hi")])
    assert decode(raw).content == [Opaque("openai_responses", search), Text("hi")]


@pytest.mark.parametrize(
    ("status", "details", "output", "stop", "raw_stop"),
    [
        ("completed", None, [message("hi")], ModelStop.end_turn, None),
        ("completed", None, [function_call("c", "{}")], ModelStop.tool_use, None),
        (
            "completed",
            None,
            [message("no", kind="refusal"), function_call("c", "{}")],
            ModelStop.refusal,
            None,
        ),
        (
            "incomplete",
            {"reason": "max_output_tokens"},
            [message("hi")],
            ModelStop.max_tokens,
            None,
        ),
        ("incomplete", {"reason": "content_filter"}, [], ModelStop.content_filter, None),
        ("incomplete", {"reason": "max_messages"}, [], ModelStop.other, "max_messages"),
        ("incomplete", {"reason": "a_future_reason"}, [], ModelStop.other, "a_future_reason"),
        ("incomplete", None, [], ModelStop.other, "incomplete"),
        ("cancelled", None, [], ModelStop.other, "cancelled"),
        ("a_future_status", None, [], ModelStop.other, "a_future_status"),
    ],
)
def test_status_maps_to_a_neutral_stop(
    status: str, details: Any, output: list, stop: ModelStop, raw_stop: str | None
) -> None:
    reply = decode(body(output, status=status, incomplete_details=details))
    assert (reply.stop, reply.raw_stop) == (stop, raw_stop)


def test_the_unknown_stop_trace_keeps_its_raw_reason() -> None:
    reply = decode(load("unknown_stop.json")["exchanges"][0]["response"]["body"])
    assert (reply.stop, reply.raw_stop) == (ModelStop.other, "max_messages")
    assert reply.content == [Text("北京是中国的首都,")]


def test_only_the_call_max_tokens_cut_is_incomplete() -> None:
    no_status = {k: v for k, v in function_call("call_2", '{"ci').items() if k != "status"}
    raw = body(
        [function_call("call_1", "{}"), no_status],
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
    )
    first, second = decode(raw).content
    assert (first.complete, second.complete) == (True, False)  # type: ignore[union-attr]
    assert second.raw_arguments == '{"ci'  # type: ignore[union-attr]
    marked = body([function_call("call_1", "{}", status="incomplete")])
    assert decode(marked).content[0].complete is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        ({"code": "server_error", "message": "boom"}, "server_error", True),
        ({"code": "rate_limit_exceeded", "message": "slow down"}, "rate_limit_exceeded", True),
        ({"code": "invalid_prompt", "message": "no"}, "invalid_prompt", False),
        (None, "failed", True),
    ],
)
def test_a_failed_response_is_a_provider_error(error: Any, kind: str, retryable: bool) -> None:
    with pytest.raises(ProviderError) as raised:
        decode(body([], status="failed", error=error, usage=None))
    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    if error is not None:
        assert error["message"] in raised.value.message


def test_usage_counts_cached_written_and_reasoning_tokens() -> None:
    usage = {
        "input_tokens": 2048,
        "input_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 256},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 192},
        "total_tokens": 2348,
    }
    assert decode(body([], usage=usage)).usage == Usage(2048, 300, 1536, 256, 192)
    assert decode(body([], usage=None)).usage == Usage()
    bare = {"input_tokens": 7, "output_tokens": 3, "input_tokens_details": None}
    assert decode(body([], usage=bare)).usage == Usage(7, 3)


# -- the stream accumulator ----------------------------------------------------------------------


def added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "response.output_item.added",
        "output_index": index,
        "item": item,
        "sequence_number": 0,
    }


def item_done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "response.output_item.done",
        "output_index": index,
        "item": item,
        "sequence_number": 0,
    }


def args_delta(index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {
        "type": "response.function_call_arguments.delta",
        "output_index": index,
        "item_id": item_id,
        "delta": delta,
        "sequence_number": 0,
    }


def text_delta(index: int, delta: str, content_index: int = 0) -> dict[str, Any]:
    return {
        "type": "response.output_text.delta",
        "output_index": index,
        "content_index": content_index,
        "item_id": "msg_1",
        "delta": delta,
        "logprobs": [],
        "sequence_number": 0,
    }


def completed(raw: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.completed", "response": raw, "sequence_number": 0}


def test_arguments_deltas_carry_the_call_id_not_the_item_id() -> None:
    call = function_call("call_abc", '{"city":"北京"}', fid="fc_xyz")
    acc = StreamAccumulator()
    assert acc.feed(added(0, message("hi"))) == [TextDelta(0, "hi")]
    assert acc.feed(added(1, {**call, "arguments": "", "status": "in_progress"})) == []
    assert acc.feed(args_delta(1, "fc_xyz", '{"city":')) == [
        ArgumentsDelta(1, "call_abc", "get_weather", '{"city":')
    ]
    assert acc.feed(args_delta(1, "fc_xyz", '"北京"}')) == [
        ArgumentsDelta(1, "call_abc", "get_weather", '"北京"}')
    ]
    acc.feed(item_done(1, call))
    acc.feed(completed(body([message("hi"), call])))
    assert acc.result().content[1].id == "call_abc"  # type: ignore[union-attr]


def test_arguments_for_an_item_never_opened_are_a_decode_error() -> None:
    acc = StreamAccumulator()
    with pytest.raises(DecodeError) as raised:
        acc.feed(args_delta(0, "fc_unknown", "{"))
    assert raised.value.path == "item_id"


def test_a_streamed_call_without_call_id_is_a_decode_error() -> None:
    acc = StreamAccumulator()
    with pytest.raises(DecodeError) as raised:
        acc.feed(added(0, function_call(None, "")))
    assert raised.value.path == "item.call_id"


def test_summary_deltas_are_separated_as_decode_joins_them() -> None:
    item = reasoning("rs_1", "想一想", "再想想")
    events = [
        added(0, {**item, "summary": []}),
        *(
            {
                "type": "response.reasoning_summary_part.added",
                "output_index": 0,
                "item_id": "rs_1",
                "summary_index": si,
                "part": {"type": "summary_text", "text": ""},
                "sequence_number": 0,
            }
            if kind == "part"
            else {
                "type": "response.reasoning_summary_text.delta",
                "output_index": 0,
                "item_id": "rs_1",
                "summary_index": si,
                "delta": kind,
                "sequence_number": 0,
            }
            for si, kind in [(0, "part"), (0, "想一"), (0, "想"), (1, "part"), (1, "再想想")]
        ),
        item_done(0, item),
        completed(body([item])),
    ]
    acc, deltas = accumulate(events)
    assert deltas == [
        ThinkingDelta(0, "想一"),
        ThinkingDelta(0, "想"),
        ThinkingDelta(0, "\n\n"),
        ThinkingDelta(0, "再想想"),
    ]
    assert acc.result().content == [Thinking("想一想\n\n再想想", provider_data=item)]


def test_a_character_split_across_deltas_is_shown_whole() -> None:
    high, low = "\ud83c", "\udf27"  # 🌧 as two UTF-16 halves
    acc = StreamAccumulator()
    acc.feed(added(0, {**message(""), "content": []}))
    assert acc.feed(text_delta(0, "雨" + high)) == [TextDelta(0, "雨")]
    assert acc.feed(text_delta(0, low + "!")) == [TextDelta(0, "🌧!")]
    acc.feed(completed(body([message("雨🌧!")])))
    assert acc.result().content == [Text("雨🌧!")]


def test_the_nested_error_event_shape_is_understood_too() -> None:
    acc = StreamAccumulator()
    event = {
        "type": "error",
        "sequence_number": 2,
        "error": {
            "type": "service_unavailable_error",
            "code": "server_is_overloaded",
            "message": "Our servers are currently overloaded.",
            "param": None,
        },
    }
    with pytest.raises(ProviderError) as raised:
        acc.feed(event)
    assert (raised.value.kind, raised.value.retryable) == ("server_is_overloaded", True)


@pytest.mark.parametrize(
    ("event", "kind", "retryable"),
    [
        (
            {"type": "error", "code": "invalid_prompt", "message": "no", "param": None},
            "invalid_prompt",
            False,
        ),
        ({"type": "error", "code": None, "message": "oops", "param": None}, "error", True),
        (
            {
                "type": "response.failed",
                "response": body(
                    [], status="failed", error={"code": "server_error", "message": "x"}
                ),
            },
            "server_error",
            True,
        ),
    ],
)
def test_failure_events_raise_provider_errors(event: dict, kind: str, retryable: bool) -> None:
    acc = StreamAccumulator()
    with pytest.raises(ProviderError) as raised:
        acc.feed({**event, "sequence_number": 3})
    assert (raised.value.kind, raised.value.retryable) == (kind, retryable)
    assert acc.feed(completed(body([message("late")]))) == []
    with pytest.raises(ProviderError):
        acc.result()


def test_a_stream_without_a_terminal_event_is_incomplete_and_retryable() -> None:
    acc = StreamAccumulator()
    acc.feed(added(0, {**message(""), "content": []}))
    acc.feed(text_delta(0, "北京"))
    with pytest.raises(ProviderError) as raised:
        acc.result()
    assert (raised.value.kind, raised.value.retryable) == ("incomplete_stream", True)


def test_a_streamed_refusal_is_text_with_stop_refusal() -> None:
    refusal = message("抱歉,我不能帮忙。", kind="refusal")
    part = {"type": "refusal", "refusal": ""}
    common = {"output_index": 0, "item_id": "msg_1", "content_index": 0, "sequence_number": 0}
    events = [
        added(0, {**refusal, "content": [], "status": "in_progress"}),
        {"type": "response.content_part.added", "part": part, **common},
        {"type": "response.refusal.delta", "delta": "抱歉,", **common},
        {"type": "response.refusal.delta", "delta": "我不能帮忙。", **common},
        {"type": "response.refusal.done", "refusal": "抱歉,我不能帮忙。", **common},
        item_done(0, refusal),
        completed(body([refusal])),
    ]
    for event in events:
        EVENT.validate_python(event)
    acc, deltas = accumulate(events)
    assert deltas == [TextDelta(0, "抱歉,"), TextDelta(0, "我不能帮忙。")]
    assert (acc.result().content, acc.result().stop) == (
        [Text("抱歉,我不能帮忙。")],
        ModelStop.refusal,
    )


def test_an_item_seen_only_when_done_still_takes_its_place() -> None:
    call = function_call("call_1", "{}")
    acc = StreamAccumulator()
    assert acc.feed(item_done(0, message("先说一句"))) == [TextDelta(0, "先说一句")]
    acc.feed(added(1, {**call, "arguments": ""}))
    assert acc.feed(args_delta(1, "fc_1", "{}")) == [
        ArgumentsDelta(1, "call_1", "get_weather", "{}")
    ]
    acc.feed(completed(body([message("先说一句"), call])))
    assert acc.result() == decode(body([message("先说一句"), call]))


def test_arguments_cut_at_every_point_inside_escapes_add_up() -> None:
    written = json.dumps({"city": '"北京" 🌧\\'}, ensure_ascii=True)
    call = function_call("call_1", written)
    for cut in range(len(written) + 1):
        acc = StreamAccumulator()
        acc.feed(added(0, {**call, "arguments": ""}))
        fragments = [
            d.fragment
            for piece in (written[:cut], written[cut:])
            for d in acc.feed(args_delta(0, "fc_1", piece))
        ]
        acc.feed(completed(body([call])))
        assert "".join(fragments) == written
        assert acc.result().content[0].arguments == {"city": '"北京" 🌧\\'}  # type: ignore[union-attr]


def test_unknown_events_are_ignored() -> None:
    acc = StreamAccumulator()
    assert acc.feed({"type": "response.some_future_event", "sequence_number": 0}) == []
    assert acc.feed({"type": "keepalive"}) == []
    acc.feed(completed(body([message("hi")])))
    assert acc.result().content == [Text("hi")]


def test_a_terminal_response_that_contradicts_the_stream_is_a_decode_error() -> None:
    acc = StreamAccumulator()
    acc.feed(added(0, {**message(""), "content": []}))
    acc.feed(text_delta(0, "北京更暖和"))
    with pytest.raises(DecodeError) as raised:
        acc.feed(completed(body([message("上海更暖和")])))
    assert raised.value.path == "output"


def test_a_terminal_response_missing_a_streamed_part_is_a_decode_error() -> None:
    acc = StreamAccumulator()
    acc.feed(added(0, function_call("call_1", "{}")))
    with pytest.raises(DecodeError):
        acc.feed(completed(body([message("hi")])))


def test_an_empty_terminal_output_is_filled_from_the_finished_items() -> None:
    call = function_call("call_1", '{"city":"上海"}')
    acc = StreamAccumulator()
    acc.feed(added(0, {**call, "arguments": ""}))
    acc.feed(args_delta(0, "fc_1", '{"city":"上海"}'))
    acc.feed(item_done(0, call))
    acc.feed(completed(body([])))
    assert acc.result() == decode(body([call]))


def test_an_empty_terminal_output_with_unfinished_items_is_a_decode_error() -> None:
    acc = StreamAccumulator()
    acc.feed(added(0, function_call("call_1", "")))
    with pytest.raises(DecodeError) as raised:
        acc.feed(completed(body([])))
    assert raised.value.path == "output"


@pytest.mark.parametrize(
    ("event", "path"),
    [
        ("not an event", ""),
        ({"type": "response.output_item.added", "item": {}}, "output_index"),
        ({"type": "response.output_item.added", "output_index": 0}, "item"),
        ({"type": "response.output_text.delta", "output_index": 0, "content_index": 0}, "delta"),
        (
            {
                "type": "response.reasoning_summary_text.delta",
                "output_index": 0,
                "summary_index": 0,
                "delta": "x",
            },
            "output_index",
        ),
        ({"type": "response.completed"}, "response"),
    ],
)
def test_malformed_events_are_decode_errors(event: Any, path: str) -> None:
    with pytest.raises(DecodeError) as raised:
        StreamAccumulator().feed(event)
    assert raised.value.path == path


# -- streaming, split anywhere -------------------------------------------------------------------

PIECE = st.one_of(
    st.sampled_from(['"', "\\", "\n", "é", "北京", "😀", "🌧", "\u2028", "}"]),
    st.characters(exclude_categories=("Cs",)),
)
TEXT = st.lists(PIECE, max_size=12).map("".join)
VALUE = st.one_of(TEXT, st.integers(), st.booleans(), st.none(), st.lists(TEXT, max_size=2))


def split(text: str, cuts: list[int]) -> list[str]:
    """`text` cut at positions counted in UTF-16 code units, so a cut may halve a character."""
    units = text.encode("utf-16-le", "surrogatepass")
    bounds = sorted({0, len(units) // 2, *(c % (len(units) // 2 + 1) for c in cuts)})
    return [
        units[2 * a : 2 * b].decode("utf-16-le", "surrogatepass")
        for a, b in itertools.pairwise(bounds)
    ]


@st.composite
def streams(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A final Response (reasoning, a message, calls) and an event stream that builds it."""
    cuts = st.lists(st.integers(0, 400), max_size=6)
    summaries = draw(st.lists(TEXT.filter(bool), max_size=3))
    texts = draw(st.lists(TEXT, min_size=1, max_size=2))
    calls = draw(st.lists(st.dictionaries(TEXT, VALUE, max_size=3), max_size=2))
    ascii_only = draw(st.booleans())
    output: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    seq = iter(range(10_000))

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": next(seq), **fields})

    if summaries or draw(st.booleans()):
        item = reasoning("rs_1", *summaries)
        emit("response.output_item.added", output_index=0, item={**item, "summary": []})
        for si, summary in enumerate(summaries):
            part = {"type": "summary_text", "text": ""}
            emit(
                "response.reasoning_summary_part.added",
                output_index=0,
                item_id="rs_1",
                summary_index=si,
                part=part,
            )
            for piece in split(summary, draw(cuts)):
                emit(
                    "response.reasoning_summary_text.delta",
                    output_index=0,
                    item_id="rs_1",
                    summary_index=si,
                    delta=piece,
                )
        emit("response.output_item.done", output_index=0, item=item)
        output.append(item)
    at = len(output)
    msg = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
    }
    emit(
        "response.output_item.added",
        output_index=at,
        item={**msg, "content": [], "status": "in_progress"},
    )
    for ci, text in enumerate(texts):
        part = {"type": "output_text", "text": "", "annotations": []}
        emit(
            "response.content_part.added",
            output_index=at,
            item_id="msg_1",
            content_index=ci,
            part=part,
        )
        for piece in split(text, draw(cuts)):
            emit(
                "response.output_text.delta",
                output_index=at,
                item_id="msg_1",
                content_index=ci,
                delta=piece,
                logprobs=[],
            )
    emit("response.output_item.done", output_index=at, item=msg)
    output.append(msg)
    for n, arguments in enumerate(calls):
        at = len(output)
        written = json.dumps(arguments, ensure_ascii=ascii_only)
        call = function_call(f"call_{n}", written, fid=f"fc_{n}")
        emit(
            "response.output_item.added",
            output_index=at,
            item={**call, "arguments": "", "status": "in_progress"},
        )
        for piece in split(written, draw(cuts)):
            emit(
                "response.function_call_arguments.delta",
                output_index=at,
                item_id=f"fc_{n}",
                delta=piece,
            )
        emit("response.output_item.done", output_index=at, item=call)
        output.append(call)
    final = body(output)
    emit("response.completed", response=final)
    return final, json.loads(json.dumps(events))


@settings(max_examples=150, deadline=None)
@given(streams())
def test_a_stream_split_anywhere_adds_up_to_its_final_response(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    final, events = case
    acc, deltas = accumulate(events)
    result = acc.result()
    assert result == decode(final)
    shown: dict[int, str] = {}
    for d in deltas:
        shown[d.index] = shown.get(d.index, "") + (
            d.fragment if type(d) is ArgumentsDelta else d.text
        )
    for index, part in enumerate(result.content):
        whole = part.provider_data["arguments"] if type(part) is ToolCall else part.text  # type: ignore[union-attr]
        assert shown.get(index, "") == whole
    for d in deltas:
        if type(d) is ArgumentsDelta:
            assert d.call_id == result.content[d.index].id  # type: ignore[union-attr]


# -- encoding a growing history: each call reuses what the last one encoded ---------------------

from turnstile.core.messages import History, Message  # noqa: E402
from turnstile.providers import WireCache  # noqa: E402

REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
CACHE_PARTS = st.one_of(
    st.builds(Text, st.sampled_from(["", "看看"])),
    st.builds(Thinking, st.just("想"), provider_data=st.sampled_from([None, REASONING])),
    st.builds(
        ToolCall,
        st.sampled_from(["call_1", "call_2"]),
        st.just("get_weather"),
        st.fixed_dictionaries({"city": st.sampled_from(["北京", "上海"])}),
        provider_data=st.sampled_from(
            [None, {"id": "fc_1"}, {"id": "fc_1", "arguments": '{"city": "北京"}'}]
        ),
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


def whole_body(messages: list[Message]) -> dict[str, Any]:
    """The body of a plain list of messages, which is never cached: the reference."""
    return encode(ModelRequest("s", list(messages), (), 100), model="m")


def view_body(ledger: list[Message], n: int, cache: WireCache) -> dict[str, Any]:
    """The body of the first `n` messages of `ledger` as a client sends them (a `History`)."""
    return encode(ModelRequest("s", History(ledger, n), (), 100), model="m", cache=cache)


@settings(max_examples=150, deadline=None)
@given(ledger=st.lists(CACHE_MESSAGES, max_size=8), data=st.data())
def test_views_of_a_history_encode_as_the_whole_list_in_any_order(
    ledger: list[Message], data: st.DataObject
) -> None:
    views = data.draw(st.lists(st.integers(0, len(ledger)), min_size=1, max_size=6))
    cache = WireCache()
    for n in views:
        assert view_body(ledger, n, cache) == whole_body(ledger[:n])


def test_a_caller_changing_a_body_s_own_containers_leaves_the_next_body_alone() -> None:
    call = ToolCall("call_1", "get_weather", {"city": "北京"}, provider_data={"id": "fc_1"})
    ledger: list[Message] = [
        UserMessage("q"),
        AssistantMessage([Thinking("想", provider_data=REASONING), call]),
    ]
    cache = WireCache()
    body = view_body(ledger, 2, cache)
    body["input"].append({"type": "message", "role": "user", "content": "injected"})
    body["input"].pop(0)
    body["include"].clear()
    ledger.append(ToolResults([ToolResult(call.id, "26")]))
    assert view_body(ledger, 3, cache) == whole_body(ledger)


def test_reasoning_items_in_bodies_are_copies_of_the_message_s_own() -> None:
    thinking = Thinking(
        "想", provider_data={**REASONING, "summary": [{"type": "summary_text", "text": "想"}]}
    )
    ledger: list[Message] = [UserMessage("q"), AssistantMessage([thinking])]
    item = view_body(ledger, 2, WireCache())["input"][1]
    assert item == thinking.provider_data
    assert item is not thinking.provider_data
    assert item["summary"] is not thinking.provider_data["summary"]


# -- items only the client can answer, and calls a program made ----------------------------------

CLIENT_ITEMS = {
    "local_shell_call": {
        "id": "lsh_1",
        "call_id": "call_l",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls", "-l"], "env": {}},
    },
    "shell_call": {
        "id": "sh_1",
        "call_id": "call_s",
        "status": "completed",
        "action": {"commands": ["ls"], "timeout_ms": 1000, "max_output_length": 4096},
    },
    "apply_patch_call": {
        "id": "ap_1",
        "call_id": "call_a",
        "status": "completed",
        "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@\n-a\n+b"},
    },
    "mcp_approval_request": {
        "id": "mcpr_1",
        "name": "delete_repo",
        "arguments": '{"repo": "x"}',
        "server_label": "github",
    },
    "custom_tool_call": {"id": "ctc_1", "call_id": "call_c", "name": "grammar", "input": "x"},
    "computer_call": {
        "id": "cu_1",
        "call_id": "call_u",
        "status": "completed",
        "action": {"type": "screenshot"},
        "pending_safety_checks": [],
    },
    "tool_search_call": {
        "id": "ts_1",
        "call_id": "call_t",
        "execution": "client",
        "status": "completed",
        "arguments": {"query": "weather"},
    },
}


@pytest.mark.parametrize("kind", CLIENT_ITEMS)
def test_an_item_only_the_client_can_answer_stops_the_reply_with_its_name(kind: str) -> None:
    """The API waits for its answer: the reply is neither end_turn nor a plain tool_use."""
    item = {"type": kind, **CLIENT_ITEMS[kind]}
    OUTPUT_ITEM.validate_python(item)
    for output in ([message("我来看看。"), item], [function_call("call_1", "{}"), item]):
        raw = body(output)
        reply = decode(raw)
        assert (reply.stop, reply.raw_stop) == (ModelStop.requires_action, kind)
        events = [added(i, it) for i, it in enumerate(output)] + [completed(raw)]
        assert accumulate(events)[0].result() == reply


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        (
            {"type": "shell_call", **CLIENT_ITEMS["shell_call"]},
            {
                "type": "shell_call_output",
                "id": "sho_1",
                "call_id": "call_s",
                "output": [
                    {"stdout": "a.py", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
                ],
            },
        ),
        (
            {"type": "tool_search_call", **CLIENT_ITEMS["tool_search_call"], "execution": "server"},
            None,
        ),
    ],
)
def test_an_item_the_server_answered_itself_is_no_stop(call: dict, answer: dict | None) -> None:
    output = [call, *([answer] if answer else []), message("done")]
    reply = decode(body(output))
    kept = [Opaque("openai_responses", item) for item in output[:-1]]
    assert (reply.stop, reply.raw_stop, reply.content) == (
        ModelStop.end_turn,
        None,
        [*kept, Text("done")],
    )


def test_calls_a_program_made_are_whole_in_a_completed_response() -> None:
    """Programmatic tool calling: the calls stay in_progress until their output comes back."""
    program = {"type": "program", "caller_id": "call_p"}
    calls = [
        function_call(f"call_{n}", '{"city": "北京"}', fid=f"fc_{n}", status="in_progress")
        | {"caller": program}
        for n in range(2)
    ]
    raw = body(calls)
    reply = decode(raw)
    assert reply.stop is ModelStop.tool_use
    assert [(c.id, c.complete, c.arguments) for c in reply.content] == [  # type: ignore[union-attr]
        ("call_0", True, {"city": "北京"}),
        ("call_1", True, {"city": "北京"}),
    ]
    assert reply.content[0].provider_data["caller"] == program  # type: ignore[union-attr]
    assert accumulate([completed(raw)])[0].result() == reply
    cut = body(calls, status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    first, last = decode(cut).content
    assert (first.complete, last.complete) == (True, False)  # type: ignore[union-attr]


def test_an_http_error_body_is_a_provider_error() -> None:
    error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
    with pytest.raises(ProviderError) as raised:
        decode({"error": error})
    assert (raised.value.kind, raised.value.retryable) == ("rate_limit_exceeded", True)
    with pytest.raises(ProviderError) as raised:
        decode({"error": {"message": "no", "type": "invalid_request_error", "code": None}})
    assert (raised.value.kind, raised.value.retryable) == ("invalid_request_error", False)


@pytest.mark.parametrize(
    ("name", "point"),
    [
        ("weather.stream.json", None),  # not in background mode: the API keeps no stream
        (
            "background_resumed.stream.json",
            ("resp_0e5f7a9b3c2d4e6f0069a1f2c9e8d7c6b5a4f3e2d1c0b9", 12),
        ),
    ],
)
def test_a_stream_s_resume_point_is_its_background_reply_and_last_event(
    name: str, point: tuple[str, int] | None
) -> None:
    cut = load(name)["exchanges"][1]["response"]["sse"]
    acc, _ = accumulate(sse_events(cut)[:13])
    assert acc.resume_point() == point
