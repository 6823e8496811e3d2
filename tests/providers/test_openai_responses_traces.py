"""The Responses traces of media, caching and answers, replayed through the real SDK client: media
both ways, a hosted tool's item sent back, strict tools and the loop's tool_choice, a typed answer
corrected after a wrong one, caching on (the key) and off, and each request a continuation of
the last."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from turnstile.core import LoopSpec, ModelRequest, StopReason
from turnstile.core.messages import (
    AssistantMessage,
    Document,
    Image,
    Message,
    Opaque,
    Text,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy
from turnstile.executors.testing import replay
from turnstile.providers.openai_responses import decode, encode
from turnstile.providers.replay import load_trace, spec_for

from .responses_types import Weather

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openai-responses"
TRACES = sorted(p.name for p in FIXTURES.glob("*.json"))
WARMER = (
    "根据实时天气数据:上海更暖和,目前气温 29°C,天气晴,湿度 68%;北京 26°C,多云,湿度 45%。"
    "上海比北京(26°C)高出 3°C。"
)

SEARCHED = "是的:上海 29°C,北京 26°C,上海暖和 3°C。"


def bodies(name: str) -> list[dict[str, Any]]:
    """The bodies posted (a GET for the rest of a stream has none)."""
    return [e.request.body for e in load_trace(FIXTURES / name).exchanges if e.request.body]


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    ("name", "reason", "output"),
    [
        ("media.json", StopReason.completed, "Shanghai is warmer."),
        ("web_search.stream.json", StopReason.completed, "Shanghai is warmer."),
        ("output_tool.json", StopReason.finish_tool, Weather("上海", 29)),
        ("output_native.json", StopReason.completed, Weather("Shanghai", 29)),
        ("cache_off.json", StopReason.completed, "Shanghai is warmer."),
        ("instructions.json", StopReason.completed, "Shanghai is warmer."),
        ("stored.json", StopReason.completed, WARMER),
        ("background_resumed.stream.json", StopReason.completed, WARMER),
        ("tool_search.json", StopReason.completed, SEARCHED),
    ],
)
def test_each_trace_replays_through_the_sdk_client(
    name: str, reason: StopReason, output: Any
) -> None:
    run = replay(FIXTURES / name)
    assert run.finish is not None
    assert (run.finish.reason, run.finish.output) == (reason, output)
    assert type(run.finish.output) is type(output)


def test_a_stored_run_names_each_response_it_continues_and_sends_only_new_items() -> None:
    trace = load_trace(FIXTURES / "stored.json")
    first, second = trace.exchanges
    assert second.request.body["previous_response_id"] == first.response.body["id"]
    assert [i["type"] for i in second.request.body["input"]] == ["function_call_output"] * 2
    run = replay(FIXTURES / "stored.json")
    [call] = [p for p in run.messages[1].content if p.provider_data and "stored" in p.provider_data]
    assert call.provider_data["stored"]["id"] == first.response.body["id"]


def test_a_dropped_background_stream_is_picked_up_after_its_last_event() -> None:
    trace = load_trace(FIXTURES / "background_resumed.stream.json")
    cut, rest = trace.exchanges[1:]
    last = cut.response.sse.rstrip().rsplit("\n", 1)[-1]  # type: ignore[union-attr]
    after = json.loads(last.removeprefix("data: "))["sequence_number"]
    first = rest.response.sse.split("\n", 2)[1]  # type: ignore[union-attr]
    assert json.loads(first.removeprefix("data: "))["sequence_number"] == after + 1
    assert (rest.request.method, rest.request.body) == ("GET", None)
    run = replay(FIXTURES / "background_resumed.stream.json")
    assert run.finish is not None and run.finish.output == WARMER
    assert len(run.messages) == 4  # one reply for the cut stream and its rest


def test_media_round_trips_encode_the_format_decode_into_the_next_request() -> None:
    trace = load_trace(FIXTURES / "media.json")
    first, second = (e.request.body for e in trace.exchanges)
    [prompt] = first["input"]
    user = UserMessage(
        [
            Text("Which city is warmer? Use the chart and the report."),
            Image("image/png", _data(prompt["content"][1]["image_url"])),
            Document(
                "application/pdf", _data(prompt["content"][2]["file_data"]), name="report.pdf"
            ),
        ]
    )
    reply = decode(trace.exchanges[0].response.body)
    [call] = reply.content
    result = ToolResult(
        call.id,  # type: ignore[union-attr]
        [Text("chart of Shanghai"), Image(url="https://example.com/Shanghai.png")],
    )
    history = [user, AssistantMessage(reply.content), ToolResults([result])]
    spec = spec_for(trace)
    request = _request(spec, history, first["prompt_cache_key"])
    assert encode(request, model="gpt-5.1") == second
    output = second["input"][-1]["output"]
    assert [p["type"] for p in output] == ["input_text", "input_image"]


def _data(url: str) -> bytes:
    return base64.b64decode(url.partition(";base64,")[2])


def _request(spec: LoopSpec, history: list[Message], key: str) -> ModelRequest:
    return ModelRequest(
        None, history, spec.tools, spec.max_tokens, cache=CachePolicy(), cache_key=key
    )


def test_the_hosted_search_item_goes_back_verbatim_with_the_cited_text() -> None:
    trace = load_trace(FIXTURES / "web_search.stream.json")
    first, second = (e.request.body for e in trace.exchanges)
    assert first["tools"][1] == {"type": "web_search"}
    done = [
        json.loads(line.removeprefix("data: "))["item"]
        for line in trace.exchanges[0].response.sse.splitlines()  # type: ignore[union-attr]
        if line.startswith("data: ") and '"response.output_item.done"' in line
    ]
    search, said, call = done
    assert search["type"] == "web_search_call"
    sent = second["input"][1:4]
    assert compact(sent[0]) == compact(search)
    assert sent[1]["content"][0]["annotations"] == said["content"][0]["annotations"]
    assert (sent[2]["call_id"], sent[2]["arguments"]) == (call["call_id"], call["arguments"])
    run = replay(trace)
    kept = [p for p in run.messages[1].content if type(p) is Opaque]  # type: ignore[union-attr]
    assert kept == [Opaque("openai_responses", search)]


def test_strict_tools_and_the_loop_s_tool_choice_are_on_every_request() -> None:
    for body in bodies("output_tool.json"):
        assert body["tool_choice"] == "required"
        assert [(t["name"], t["strict"]) for t in body["tools"]] == [
            ("get_weather", True),
            ("final_answer", True),
        ]
        assert all(t["parameters"]["additionalProperties"] is False for t in body["tools"])


def test_the_model_reads_why_its_answer_was_wrong_and_corrects_it() -> None:
    tool = bodies("output_tool.json")[-1]["input"]
    assert tool[-1]["type"] == "function_call_output"
    assert "Expected `int`, got `str` - at `$.temp_c`" in tool[-1]["output"]
    native = bodies("output_native.json")
    assert all(b["text"]["format"]["type"] == "json_schema" for b in native)
    assert native[1]["input"][-1] == {
        "type": "message",
        "role": "user",
        "content": "the answer is not JSON (Expecting value: line 1 column 1 (char 0)); "
        "reply with the JSON object only.",
    }


@pytest.mark.parametrize("name", TRACES)
def test_caching_is_on_unless_the_trace_turns_it_off(name: str) -> None:
    off = not spec_for(load_trace(FIXTURES / name)).cache.enabled
    assert off == (name == "cache_off.json")
    keys = {b.get("prompt_cache_key") for b in bodies(name)}
    assert keys == {None} if off else len(keys) == 1 and None not in keys


@pytest.mark.parametrize("name", TRACES)
def test_each_request_s_prefix_is_byte_identical_to_the_previous_request(name: str) -> None:
    """What the cache can serve: the same instructions and tools, and the previous request's
    input items, byte for byte, at the start of the next one; with server-side state, the next
    request names the previous response instead and sends only new items."""
    sent = bodies(name)
    for before, after in itertools.pairwise(sent):
        chained = after.pop("previous_response_id", None) is not None
        assert {k: v for k, v in before.items() if k != "input"} == {
            k: v for k, v in after.items() if k != "input"
        }
        if chained:
            assert not {item["type"] for item in after["input"]} & {"message", "function_call"}
            continue
        head = after["input"][: len(before["input"])]
        assert compact(head) == compact(before["input"])


def test_a_tool_search_run_sends_the_deferred_tool_and_every_item_of_the_search_back() -> None:
    """The hosted tool search first, the deferred tool marked; the reply's items all go back:
    reasoning without summary, the search's call and output as they came, two messages as two
    items, the calls."""
    first, second = bodies("tool_search.json")
    assert first["tools"][0] == {"type": "tool_search"}
    assert [t.get("defer_loading") for t in first["tools"][1:]] == [True]
    reply = load_trace(FIXTURES / "tool_search.json").exchanges[0].response.body["output"]
    sent = second["input"][1:-2]
    assert [i["type"] for i in sent] == [i["type"] for i in reply]
    assert sent[:3] == reply[:3]
