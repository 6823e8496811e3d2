"""The OpenAI Responses codec keeps every output item it does not read (hosted tools' calls,
types newer than the codec) and sends it back; a garbled function call is an error."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from openai.types.responses import ResponseOutputItem
from pydantic import TypeAdapter
from turnstile.core import ModelRequest
from turnstile.core.messages import AssistantMessage, ModelStop, Opaque, Text, ToolCall, UserMessage
from turnstile.providers._client import read_body
from turnstile.providers._errors import DecodeError
from turnstile.providers.openai_responses import Client, StreamAccumulator, decode, encode

OUTPUT_ITEM = TypeAdapter(ResponseOutputItem)
HOSTED = {
    "web_search_call": {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "Shanghai weather"},
    },
    "file_search_call": {
        "id": "fs_1",
        "type": "file_search_call",
        "status": "completed",
        "queries": ["warmer"],
        "results": None,
    },
    "code_interpreter_call": {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "status": "completed",
        "code": "print(1)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "1"}],
    },
    "image_generation_call": {
        "id": "ig_1",
        "type": "image_generation_call",
        "status": "completed",
        "result": "iVBORw0KGgo=",
    },
    "mcp_call": {
        "id": "mcp_1",
        "type": "mcp_call",
        "server_label": "deepwiki",
        "name": "ask_question",
        "arguments": '{"q": "x"}',
        "output": "y",
    },
    "mcp_list_tools": {
        "id": "mcpl_1",
        "type": "mcp_list_tools",
        "server_label": "deepwiki",
        "tools": [{"name": "ask_question", "input_schema": {}}],
    },
    "program": {
        "id": "prg_1",
        "type": "program",
        "call_id": "call_p",
        "code": "x = 1",
        "fingerprint": "fp_1",
    },
    "a_type_from_next_year": {"id": "new_1", "type": "a_type_from_next_year", "stuff": [1, {}]},
}


def body(output: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1764680000,
        "status": status,
        "model": "gpt-5.1",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 8},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        },
    }


def message(*content: dict[str, Any], **more: Any) -> dict[str, Any]:
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed"}
    return {**item, "content": list(content), **more}


def text(value: str, annotations: list[Any] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": value, "annotations": annotations or []}


def stream(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of `raw` streamed: each item added empty then done, texts as deltas."""
    events: list[dict[str, Any]] = []
    for at, item in enumerate(raw["output"]):
        opened = {**item, "content": []} if item["type"] == "message" else item
        events.append({"type": "response.output_item.added", "output_index": at, "item": opened})
        for ci, part in enumerate(item.get("content", []) if item["type"] == "message" else []):
            where = {"output_index": at, "content_index": ci, "item_id": item["id"]}
            if part["type"] != "output_text":
                events.append({"type": "response.content_part.added", **where, "part": part})
                continue
            empty = {**part, "text": ""}
            events.append({"type": "response.content_part.added", **where, "part": empty})
            events.append({"type": "response.output_text.delta", **where, "delta": part["text"]})
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    return events


def streamed(events: list[dict[str, Any]], final: dict[str, Any]) -> Any:
    acc = StreamAccumulator()
    for event in [*events, {"type": "response.completed", "response": final}]:
        acc.feed(event)
    return acc.result()


@pytest.mark.parametrize("kind", HOSTED)
def test_an_item_the_codec_does_not_read_is_kept_and_goes_back_as_it_came(kind: str) -> None:
    item = HOSTED[kind]
    if kind != "a_type_from_next_year":
        OUTPUT_ITEM.validate_python(item)
    raw = body([item, message(text("xxx"))])
    reply = decode(raw)
    assert reply.content == [Opaque("openai_responses", item), Text("xxx")]
    assert reply.stop is ModelStop.end_turn
    assert reply.content[0].data is not item  # type: ignore[union-attr]
    history = [UserMessage("q"), AssistantMessage(reply.content)]
    sent = encode(ModelRequest(None, history, (), 64), model="m")["input"]
    assert sent[1] == item
    assert streamed(stream(raw), raw) == reply


def test_a_streamed_reply_with_an_empty_terminal_output_takes_its_items_when_done() -> None:
    item = HOSTED["web_search_call"]
    raw = body([item, message(text("xxx"))])
    reply = streamed(stream(raw), {**raw, "output": []})
    assert reply.content == [Opaque("openai_responses", item), Text("xxx")]


def test_texts_keep_their_annotations_and_phase_for_the_way_back() -> None:
    cite = {
        "type": "url_citation",
        "start_index": 0,
        "end_index": 8,
        "title": "Weather",
        "url": "https://example.com/w",
    }
    item = message(text("Shanghai", [cite]), text(" is warmer."), phase="final_answer")
    OUTPUT_ITEM.validate_python(item)
    reply = decode(body([item]))
    assert reply.content == [
        Text("Shanghai", provider_data={"phase": "final_answer", "annotations": [cite]}),
        Text(" is warmer.", provider_data={"phase": "final_answer"}),
    ]
    sent = encode(
        ModelRequest(None, [UserMessage("q"), AssistantMessage(reply.content)], (), 64), model="m"
    )["input"][1]
    assert sent == {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "Shanghai", "annotations": [cite]},
            {"type": "output_text", "text": " is warmer."},
        ],
        "phase": "final_answer",
    }


def test_a_content_part_of_an_unknown_type_is_kept_in_its_place() -> None:
    odd = {"type": "output_audio", "data": "UklGRg=="}
    raw = body([message(text("a"), odd, text("b"))])
    reply = decode(raw)
    alone = {"type": "message", "role": "assistant", "content": [odd]}
    assert reply.content == [Text("a"), Opaque("openai_responses", alone), Text("b")]
    assert streamed(stream(raw), raw) == reply
    sent = encode(
        ModelRequest(None, [UserMessage("q"), AssistantMessage(reply.content)], (), 64), model="m"
    )["input"][1:]
    assert [i["content"] for i in sent] == [
        [{"type": "output_text", "text": "a"}],
        [odd],
        [{"type": "output_text", "text": "b"}],
    ]


@pytest.mark.parametrize("kind", ["function_cal", "functioncall", "Function_call", "tool_call"])
def test_an_item_with_a_function_call_s_fields_under_another_type_is_an_error(kind: str) -> None:
    """The rule telling a typo from a new type: only a function call has call_id, name and
    arguments together; kept, a call the client must answer would never be answered."""
    item = {"id": "fc_1", "type": kind, "call_id": "call_1", "name": "get_chart", "arguments": "{}"}
    with pytest.raises(DecodeError) as raised:
        decode(body([item]))
    assert raised.value.path == "output[0].type"
    assert kind in raised.value.message
    with pytest.raises(DecodeError):
        streamed(stream(body([item])), body([item]))


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({"id": "x"}, "output[0].type"),
        ({"type": 3}, "output[0].type"),
        (message("not a part"), "output[0].content[0]"),
        (message({"text": "no type"}), "output[0].content[0].type"),
        (message(text("a"), phase=1), "output[0].phase"),
    ],
)
def test_an_item_without_its_documented_shape_is_a_decode_error(item: Any, path: str) -> None:
    with pytest.raises(DecodeError) as raised:
        decode(body([item]))
    assert raised.value.path == path


def test_cached_tokens_are_read() -> None:
    assert decode(body([message(text("a"))])).usage.cache_read_tokens == 8


def test_a_kept_item_is_a_copy_and_the_reply_s_data_stays_as_decoded() -> None:
    item = copy.deepcopy(HOSTED["code_interpreter_call"])
    raw = body([item])
    kept = decode(raw).content[0]
    item["outputs"].clear()
    assert kept.data["outputs"] == [{"type": "logs", "logs": "1"}]  # type: ignore[union-attr]


def function_call_item(arguments: str) -> dict[str, Any]:
    return {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_chart",
        "arguments": arguments,
        "status": "completed",
    }


def test_a_reply_with_a_hosted_item_and_a_call_is_still_a_tool_use() -> None:
    call = function_call_item('{"city":"Shanghai"}')
    reply = decode(body([HOSTED["web_search_call"], call]))
    assert reply.stop is ModelStop.tool_use
    assert type(reply.content[1]) is ToolCall


def test_a_kept_item_holding_a_number_no_run_can_write_is_a_decode_error() -> None:
    """Python's JSON parser reads `1e999` as infinity; kept, the run could not be written."""
    raw = b'{"status": "completed", "output": [{"type": "x", "n": [1e999]}]}'
    with pytest.raises(DecodeError) as raised:
        read_body(Client.wire, raw)
    assert (raised.value.path, raised.value.message) == (
        "output[0]",
        "holds NaN or infinity, not a finite number",
    )
    escaped = '{"n": 1e999, "s": "\\ud800"}'  # read by Python's parser, for the lone surrogate
    assert decode(body([function_call_item(escaped)])).content[0].raw_arguments == escaped


# -- a recorded conversation, decoded and written again --------------------------------------------


def written(*outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input items after the prompt of a history whose replies had `outputs` (as the API
    returned them, read by `decode` as the loop reads them), written again."""
    history: list[Any] = [UserMessage("q")]
    for output in outputs:
        raw = body(output)
        reply = decode(raw)
        assert streamed(stream(raw), raw) == reply
        history.append(AssistantMessage(reply.content))
    return encode(ModelRequest(None, history, (), 64), model="m")["input"][1:]


def sent_text(value: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": value}],
    }


def test_adjacent_messages_of_a_reply_go_back_as_as_many_messages() -> None:
    first, second = message(text("Looking.")), message(text("Shanghai."), id="msg_2")
    assert written([first, second]) == [sent_text("Looking."), sent_text("Shanghai.")]
    assert written([message(text("a"), text("b"))]) == [
        {
            **sent_text("a"),
            "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
        }
    ]


def test_a_message_of_empty_text_goes_back_and_no_item_is_lost() -> None:
    item = reasoning_item()
    call = function_call_item('{"city":"Shanghai"}')
    assert written([item, message(text("")), call]) == [item, sent_text(""), sent_call(call)]
    assert written([message(text("a")), message(text(""), id="msg_2")]) == [
        sent_text("a"),
        sent_text(""),
    ]


def sent_call(item: dict[str, Any]) -> dict[str, Any]:
    """A function call as the codec writes it back: without its status (the API's own, which
    no request of the recorded traces carries)."""
    return {k: v for k, v in item.items() if k != "status"}


def reasoning_item() -> dict[str, Any]:
    """A reasoning item as a model that shows no summary returns it: encrypted, summary empty."""
    return {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-1"}


def test_a_hosted_tool_search_and_the_call_it_allowed_go_back_as_they_came() -> None:
    search = {
        "id": "tsc_1",
        "type": "tool_search_call",
        "execution": "server",
        "call_id": None,
        "status": "completed",
        "arguments": {"paths": ["crm"]},
    }
    found = {
        "id": "tso_1",
        "type": "tool_search_output",
        "execution": "server",
        "call_id": None,
        "status": "completed",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "defer_loading": True,
                "parameters": {},
                "strict": False,
            }
        ],
    }
    call = {**function_call_item('{"city":"Shanghai"}'), "namespace": "crm"}
    OUTPUT_ITEM.validate_python(search)
    OUTPUT_ITEM.validate_python(found)
    assert written([reasoning_item(), search, found, call]) == [
        reasoning_item(),
        search,
        found,
        sent_call(call),
    ]
