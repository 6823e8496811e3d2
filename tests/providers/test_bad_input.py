"""Bad input never breaks a run: whatever JSON comes off the wire, every way into the codecs
(`decode`, `StreamAccumulator.feed` / `result`, the bytes the clients read) gives a reply a run can
keep or raises `DecodeError` / `ProviderError`, and no input costs more than its own size."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import msgspec
import pytest
from turnstile.core.messages import ModelResponse, Text, ToolCall
from turnstile.providers import DecodeError, ProviderError
from turnstile.providers import anthropic_messages as anthropic
from turnstile.providers import openai_chat as chat
from turnstile.providers import openai_responses as responses
from turnstile.providers._client import StreamReader, read_body

FORMATS: dict[str, ModuleType] = {
    "anthropic": anthropic,
    "openai-chat": chat,
    "openai-responses": responses,
}
DEEP = 2_000


def deep(kind: type = list, inner: Any = 1) -> Any:
    value = inner
    for _ in range(DEEP):
        value = [value] if kind is list else {"a": value}
    return value


def feed_all(module: ModuleType, events: list[Any]) -> ModelResponse:
    accumulator = module.StreamAccumulator()
    for event in events:
        accumulator.feed(event)
    return accumulator.result()


def keepable(response: ModelResponse) -> ModelResponse:
    """`response`, checked to be one a run can write down (the core's dump is JSON)."""
    msgspec.json.encode(response)
    return response


# -- shapes: a reply body, a stream and arguments of each format ---------------------------------


def anthropic_body(text: Any = "晴", arguments: Any = None) -> dict[str, Any]:
    """A body whose tool_use input is `arguments`, parsed when it is JSON text (as the client
    reads a body: lone surrogates kept, as escapes make them)."""
    content = [{"type": "text", "text": text}]
    if arguments is not None:
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        content.append({"type": "tool_use", "id": "toolu_1", "name": "f", "input": arguments})
    return {
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": "tool_use" if arguments is not None else "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def anthropic_stream(text: Any = "晴", arguments: str | None = None) -> list[dict[str, Any]]:
    start = {**anthropic_body(), "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
    ]
    if arguments is not None:
        call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": arguments}
        events += [
            {"type": "content_block_start", "index": 1, "content_block": call},
            {"type": "content_block_delta", "index": 1, "delta": delta},
        ]
    stop = "tool_use" if arguments is not None else "end_turn"
    events += [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]
    return events


def chat_body(text: Any = "晴", arguments: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if arguments is not None:
        function = {"name": "f", "arguments": arguments}
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": function}]
    finish = "tool_calls" if arguments is not None else "stop"
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def chat_stream(text: Any = "晴", arguments: str | None = None) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": text})]
    if arguments is not None:
        call = {"index": 0, "id": "call_1", "type": "function"}
        events.append(chunk({"tool_calls": [{**call, "function": {"name": "f", "arguments": ""}}]}))
        events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}))
    events.append(chunk({}, "tool_calls" if arguments is not None else "stop"))
    return events


def responses_body(text: Any = "晴", arguments: str | None = None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    output: list[dict[str, Any]] = [
        {"type": "message", "id": "msg_1", "role": "assistant", "content": content}
    ]
    if arguments is not None:
        output.append(
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": arguments,
                "status": "completed",
            }
        )
    return {"status": "completed", "output": output}


def responses_stream(text: Any = "晴", arguments: str | None = None) -> list[dict[str, Any]]:
    body = responses_body(text, arguments)
    message = {**body["output"][0], "content": []}
    events: list[dict[str, Any]] = [
        {"type": "response.output_item.added", "output_index": 0, "item": message},
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": text,
        },
    ]
    if arguments is not None:
        call = {**body["output"][1], "arguments": "", "status": "in_progress"}
        events += [
            {"type": "response.output_item.added", "output_index": 1, "item": call},
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 1,
                "item_id": "fc_1",
                "delta": arguments,
            },
        ]
    events.append({"type": "response.completed", "response": body})
    return events


BODIES: dict[str, Callable[..., dict[str, Any]]] = {
    "anthropic": anthropic_body,
    "openai-chat": chat_body,
    "openai-responses": responses_body,
}
STREAMS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "anthropic": anthropic_stream,
    "openai-chat": chat_stream,
    "openai-responses": responses_stream,
}


def test_the_shapes_here_are_read_as_they_are_meant() -> None:
    for name, module in FORMATS.items():
        whole = module.decode(BODIES[name]("晴", '{"a": 1}'))
        text, call = whole.content
        assert text == Text("晴")
        assert type(call) is ToolCall and (call.name, call.arguments) == ("f", {"a": 1})
        assert feed_all(module, STREAMS[name]("晴", '{"a": 1}')) == whole


# -- item 8: wrong types anywhere are DecodeError ------------------------------------------------


@pytest.mark.parametrize("value", [None, [], "x", 3, [{}]])
@pytest.mark.parametrize("name", FORMATS)
def test_a_body_or_event_that_is_not_an_object_is_a_decode_error(name: str, value: Any) -> None:
    module = FORMATS[name]
    with pytest.raises(DecodeError):
        module.decode(value)
    with pytest.raises(DecodeError):
        module.StreamAccumulator().feed(value)


@pytest.mark.parametrize("block", [None, 3, "text", []])
def test_a_message_start_holding_a_block_that_is_not_an_object_is_a_decode_error(
    block: Any,
) -> None:
    start = anthropic_stream()[0]
    start["message"]["content"] = [block]
    with pytest.raises(DecodeError) as raised:
        anthropic.StreamAccumulator().feed(start)
    assert raised.value.path == "message.content[0]"


@pytest.mark.parametrize("key", ["text", "thinking"])
@pytest.mark.parametrize("text", [5, None, ["a"], {"a": 1}])
def test_a_block_whose_first_text_is_not_a_string_is_a_decode_error(key: str, text: Any) -> None:
    events = anthropic_stream()
    block = {"type": key, key: text} | ({"signature": ""} if key == "thinking" else {})
    events[1]["content_block"] = block
    events[2]["delta"] = {"type": f"{key}_delta", key: "more"}
    accumulator = anthropic.StreamAccumulator()
    with pytest.raises(DecodeError) as raised:
        for event in events:
            accumulator.feed(event)
        accumulator.result()
    assert raised.value.path == f"content[0].{key}"


@pytest.mark.parametrize("code", [{"a": 1}, ["x"], 3, True])
def test_a_responses_error_event_whose_code_is_not_a_string_is_a_provider_error(code: Any) -> None:
    event = {"type": "error", "code": code, "message": "m", "param": None}
    with pytest.raises(ProviderError) as raised:
        responses.StreamAccumulator().feed(event)
    assert raised.value.kind == "error"
    response = {"status": "failed", "output": [], "error": {"code": code, "message": "m"}}
    with pytest.raises(ProviderError) as raised:
        responses.decode(response)
    assert raised.value.kind == "error"


# -- item 8: JSON nested deeper than Python can follow --------------------------------------------


@pytest.mark.parametrize("kind", [list, dict])
@pytest.mark.parametrize("name", FORMATS)
def test_json_nested_2000_deep_in_a_body_or_an_event_is_a_decode_error(
    name: str, kind: type
) -> None:
    module = FORMATS[name]
    body = BODIES[name]()
    body["extra"] = deep(kind)
    assert module.decode(body).content == [Text("晴")]  # a field no one reads is no matter
    nested = {"anthropic": ("content", 0), "openai-chat": ("choices", 0)}.get(name, ("output", 0))
    body[nested[0]][nested[1]]["extra"] = deep(kind)
    try:
        keepable(module.decode(body))
    except DecodeError:
        pass
    raw = json.dumps(BODIES[name]()).encode()
    text = raw[:-1] + b', "extra": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    with pytest.raises(DecodeError, match="nested"):
        read_body(module.Client.wire, text)
    events = STREAMS[name]()
    events[1]["extra"] = deep(kind)
    try:
        keepable(feed_all(module, events))
    except DecodeError:
        pass
    sse = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in STREAMS[name]())
    reader = StreamReader(module.Client.wire)
    with pytest.raises(DecodeError, match="nested"):
        reader.feed(b"data: " + b"[" * DEEP + b"]" * DEEP + b"\n\n" + sse)


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 10_000_000,
        b'{"a":' * 2_000_000,
        b"[" + b"1," * 5_000_000 + b"]",
        b"\xff" * 10_000_000,
    ],
)
def test_ten_megabytes_that_are_no_reply_are_a_decode_error(content: bytes) -> None:
    wire = anthropic.Client.wire  # the formats share the reading of bytes
    with pytest.raises(DecodeError):
        read_body(wire, content)
    reader = StreamReader(wire)
    with pytest.raises(DecodeError):
        reader.feed(b"data: " + content + b"\n\n")
        reader.result()


@pytest.mark.parametrize("name", FORMATS)
def test_a_reply_ten_megabytes_long_decodes(name: str) -> None:
    module = FORMATS[name]
    text = "晴" * 3_500_000
    assert read_body(module.Client.wire, json.dumps(BODIES[name](text)).encode()).content == [
        Text(text)
    ]
    reader = StreamReader(module.Client.wire)
    for event in STREAMS[name](text):
        reader.feed(b"data: " + json.dumps(event).encode() + b"\n\n")
    assert reader.result().content == [Text(text)]


@pytest.mark.parametrize("name", FORMATS)
def test_tool_arguments_nested_2000_deep_are_kept_as_text_so_the_call_is_not_run(
    name: str,
) -> None:
    module = FORMATS[name]
    if name == "anthropic":  # its body holds an object: what is kept is its first brackets
        call = keepable(module.decode(anthropic_body(arguments={"a": deep(dict)}))).content[-1]
        assert type(call) is ToolCall and call.arguments == {}
        assert call.raw_arguments is not None and call.raw_arguments.startswith('{"a": {"a": ')
    text = '{"a": ' + "[" * DEEP + "]" * DEEP + "}"
    replies = [feed_all(module, STREAMS[name]("x", text))]
    if name != "anthropic":  # its body holds an object, not text, which Python cannot read
        replies.append(module.decode(BODIES[name]("x", text)))
    for reply in replies:
        call = keepable(reply).content[-1]
        assert type(call) is ToolCall
        assert (call.arguments, call.raw_arguments) == ({}, text)  # not arguments: never run


# -- item 8: text is data: lone surrogates become U+FFFD ------------------------------------------

LONE = ["\ud800", "a\udc00b", "晴\ud83d", "\ude00x"]


@pytest.mark.parametrize("text", LONE)
@pytest.mark.parametrize("name", FORMATS)
def test_lone_surrogates_in_text_and_arguments_are_replaced(name: str, text: str) -> None:
    module = FORMATS[name]
    arguments = json.dumps({"city": text}, ensure_ascii=False)
    whole = keepable(module.decode(BODIES[name](text, arguments)))
    repaired = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    assert "\ufffd" in repaired
    assert whole.content[0] == Text(repaired)
    call = whole.content[1]
    assert type(call) is ToolCall and call.arguments == {"city": repaired}
    accumulator = module.StreamAccumulator()
    deltas = [d for e in STREAMS[name](text, arguments) for d in accumulator.feed(e)]
    msgspec.json.encode(deltas)
    assert keepable(accumulator.result()) == whole


@pytest.mark.parametrize("name", FORMATS)
def test_an_escaped_lone_surrogate_in_arguments_text_is_replaced_too(name: str) -> None:
    text = '{"city": "\\ud800 \\ud83d\\ude00"}'
    module = FORMATS[name]
    for reply in (
        module.decode(BODIES[name]("x", text)),
        feed_all(module, STREAMS[name]("x", text)),
    ):
        call = keepable(reply).content[-1]
        assert type(call) is ToolCall and call.arguments == {"city": "\ufffd 😀"}


@pytest.mark.parametrize("name", FORMATS)
def test_an_error_message_with_lone_surrogates_can_be_kept(name: str) -> None:
    error = {"type": "overloaded_error\ud800", "code": "x\udc00", "message": "m\ud83d"}
    body = {
        "anthropic": {"type": "error", "error": error},
        "openai-chat": {"error": error},
        "openai-responses": {"status": "failed", "output": [], "error": error},
    }[name]
    with pytest.raises(ProviderError) as raised:
        FORMATS[name].decode(body)
    msgspec.json.encode([raised.value.kind, raised.value.message, str(raised.value)])


# -- item 7: every index and count off the wire is bounded ----------------------------------------


def quickly(call: Callable[[], object]) -> None:
    """`call` raises `DecodeError` rather than walking a huge count (a guard against a hang,
    far above the microseconds it takes: the speed itself is the benchmarks' business)."""
    start = time.perf_counter()
    with pytest.raises(DecodeError):
        call()
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("key", ["summary_index", "output_index"])
def test_a_summary_index_far_past_the_summaries_is_a_decode_error(key: str) -> None:
    accumulator = responses.StreamAccumulator()
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    accumulator.feed({"type": "response.output_item.added", "output_index": 0, "item": item})
    event = {
        "type": "response.reasoning_summary_text.delta",
        "item_id": "rs_1",
        "output_index": 0,
        "summary_index": 0,
        "delta": "x",
    }
    accumulator.feed(event)
    accumulator.feed({**event, "summary_index": 1})
    quickly(lambda: accumulator.feed({**event, key: 10**9}))


@pytest.mark.parametrize(
    "event",
    [
        {"type": "response.output_item.added", "output_index": 10**9, "item": {"type": "x"}},
        {"type": "response.output_item.done", "output_index": 10**9, "item": {"type": "x"}},
        {"type": "response.output_text.delta", "output_index": 10**9, "content_index": 0},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 10**9},
        {
            "type": "response.content_part.added",
            "output_index": 0,
            "content_index": 10**9,
            "part": {"type": "output_text", "text": ""},
        },
        {"type": "response.reasoning_summary_part.added", "output_index": 10**9},
    ],
)
def test_a_responses_index_far_past_the_items_is_a_decode_error(event: dict[str, Any]) -> None:
    accumulator = responses.StreamAccumulator()
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    accumulator.feed({"type": "response.output_item.added", "output_index": 0, "item": item})
    quickly(lambda: accumulator.feed({"delta": "x", "summary_index": 0, **event}))


@pytest.mark.parametrize("index", [1, 2, 10**9, -1])
def test_a_chat_tool_call_index_past_the_next_call_is_a_decode_error(index: int) -> None:
    events = chat_stream("x", "{}")
    events[1]["choices"][0]["delta"]["tool_calls"][0]["index"] = index
    quickly(lambda: feed_all(chat, events))


@pytest.mark.parametrize("index", [2, 10**9, -1])
def test_an_anthropic_block_index_past_the_next_block_is_a_decode_error(index: int) -> None:
    events = anthropic_stream("x", "{}")
    events[3]["index"] = index
    quickly(lambda: feed_all(anthropic, events))


@pytest.mark.parametrize("tokens", [-1, 2**64, 10**30])
@pytest.mark.parametrize("name", FORMATS)
def test_a_token_count_out_of_range_is_a_decode_error(name: str, tokens: int) -> None:
    body = BODIES[name]()
    key = "prompt_tokens" if name == "openai-chat" else "input_tokens"
    body["usage"] = {
        key: tokens,
        ("completion_tokens" if name == "openai-chat" else "output_tokens"): 1,
    }
    with pytest.raises(DecodeError) as raised:
        FORMATS[name].decode(body)
    assert raised.value.path == f"usage.{key}"
