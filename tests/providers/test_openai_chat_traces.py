"""What the Chat Completions traces of media, caching and answers show, replayed through the real
SDK client: media sent again unchanged, caching on and off, the token limit field, server tools, and
a typed answer corrected after the model read what was wrong with it."""

from __future__ import annotations

import itertools
import json
import pathlib
from typing import Any

import pytest
from turnstile.core import Finish, StopReason
from turnstile.core.messages import AssistantMessage, Opaque, Text, validate_history
from turnstile.executors import sync
from turnstile.executors.testing import replay
from turnstile.providers.replay import RecordedTools, client_for, load_trace, prompt_for, spec_for

from .chat_types import Weather

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "openai-chat"
NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))


def bodies(name: str) -> list[dict[str, Any]]:
    trace = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return [e["request"]["body"] for e in trace["exchanges"]]


def wire(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize("name", NAMES)
def test_each_request_begins_with_the_bytes_of_the_one_before(name: str) -> None:
    """Chat caches the longest prefix it has seen: tools, then the messages in order. Each
    request repeats the previous one's messages byte for byte, and its tools unless it is the
    finalizing call, which offers none."""
    sent = bodies(name)
    for before, after in itertools.pairwise(sent):
        n = len(before["messages"])
        assert wire(after["messages"][:n]) == wire(before["messages"])
        if "tools" in after:
            assert wire(after["tools"]) == wire(before["tools"])


@pytest.mark.parametrize("name", NAMES)
def test_caching_is_on_with_one_key_per_trace_unless_turned_off(name: str) -> None:
    keys = {b.get("prompt_cache_key") for b in bodies(name)}
    if name == "cache_off.json":
        assert keys == {None}
    else:
        [key] = keys
        assert key is not None and key.startswith("turnstile-")


def test_the_media_of_the_prompt_go_again_unchanged_and_the_answer_comes() -> None:
    first, second = bodies("media.json")
    parts = first["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "file"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    assert parts[2]["file"]["filename"] == "report.pdf"
    assert second["messages"][0] == first["messages"][0]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_Vx3kQ9mR2tLp8sWn4bYc7dHf",
        "content": "chart of Shanghai",
    }
    run = replay(FIXTURES / "media.json")
    assert run.output == "Shanghai is warmer."
    assert run.state.usage.cache_read_tokens == 1152
    validate_history(run.messages)


def test_instructions_stand_where_they_were_given() -> None:
    [body] = bodies("instructions.json")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "developer", "system", "user"]
    assert replay(FIXTURES / "instructions.json").stop_reason is StopReason.completed


def test_the_max_tokens_trace_sends_max_tokens_alone_through_its_client_option() -> None:
    [body] = bodies("max_tokens_field.json")
    assert body["max_tokens"] == 1024 and "max_completion_tokens" not in body
    client = client_for(load_trace(FIXTURES / "max_tokens_field.json"))
    assert client.options == {"token_limit_field": "max_tokens"}
    assert replay(FIXTURES / "max_tokens_field.json").stop_reason is StopReason.completed


def test_web_search_options_come_from_the_spec_and_citations_stay_with_the_text() -> None:
    [body] = bodies("web_search.json")
    assert body["web_search_options"]["search_context_size"] == "low"
    assert "tools" not in body
    run = replay(FIXTURES / "web_search.json")
    [answer] = [m for m in run.messages if type(m) is AssistantMessage]
    [text] = answer.content
    assert type(text) is Text and text.provider_data is not None
    [citation] = text.provider_data["annotations"]
    assert text.text[citation["url_citation"]["start_index"] :].startswith("[chinahighlights")
    assert not any(type(p) is Opaque for p in answer.content)


@pytest.mark.parametrize(
    ("name", "reason", "answer"),
    [
        ("output_tool.json", StopReason.finish_tool, Weather("上海", 29)),
        ("output_native.json", StopReason.completed, Weather("Shanghai", 29)),
    ],
)
def test_a_wrong_answer_is_read_by_the_model_and_the_corrected_one_is_typed(
    name: str, reason: StopReason, answer: Weather
) -> None:
    finishes: list[Finish] = []
    run = replay(
        FIXTURES / name, on_step=lambda s: finishes.append(s) if type(s) is Finish else None
    )
    [finish] = finishes
    assert finish.reason is reason
    assert finish.output == answer and type(finish.output) is Weather
    validate_history(run.messages)
    *_, last = bodies(name)
    told = last["messages"][-1]
    if name == "output_tool.json":
        assert told["role"] == "tool"
        assert "Expected `int`, got `str` - at `$.temp_c`" in told["content"]
        assert last["tool_choice"] == "required"
        assert [t["function"]["strict"] for t in last["tools"]] == [True, True]
    else:
        assert told == {
            "role": "user",
            "content": "the answer is not JSON (Expecting value: line 1 column 1 (char 0)); "
            "reply with the JSON object only.",
        }
        assert last["response_format"]["json_schema"]["name"] == "Weather"
        assert "tool_choice" not in last


def test_a_trace_replays_on_the_wall_clock_too() -> None:
    """The conversation's cache key comes from how it began, not when: a run recorded live
    replays with `sync.run` as it is documented (the replay harness's clock starts at 0)."""
    trace = load_trace(FIXTURES / "media.json")
    run = sync.run(
        spec_for(trace), prompt_for(trace), model=client_for(trace), tools=RecordedTools(trace)
    )
    assert run.output == "Shanghai is warmer."


def test_a_history_another_client_wrote_goes_again_as_it_wrote_it() -> None:
    """Its assistant text as a list of parts, its tool messages named, only get_weather allowed;
    replayed through the SDK client, the answer comes."""
    [body] = bodies("client_history.json")
    assistant, *tools = body["messages"][1:]
    assert assistant["content"] == [{"type": "text", "text": "我来查一下两座城市的天气。"}]
    assert [t["name"] for t in tools] == ["get_weather", "get_weather"]
    assert body["tool_choice"]["type"] == "allowed_tools"
    run = replay(FIXTURES / "client_history.json")
    assert run.finish is not None and run.finish.output == "是的:上海 29°C,北京 26°C,上海暖和 3°C。"
