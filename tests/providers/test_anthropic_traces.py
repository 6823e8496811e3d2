"""The media, answer and pause Anthropic traces replayed through the real SDK client: the chart
conversation's images and document round-trip, a wrong answer is corrected, a paused turn goes
on; and a run that falls back to Anthropic from an OpenAI-compatible server after a tool ran."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import StopReason
from turnstile.core.messages import (
    AssistantMessage,
    Document,
    Image,
    Opaque,
    Text,
    Thinking,
    ToolResults,
    UserMessage,
    text_of,
)
from turnstile.executors import aio, sync
from turnstile.executors.testing import replay, run_async
from turnstile.providers import ModelRouter
from turnstile.providers.anthropic_messages import decode
from turnstile.providers.replay import (
    RecordedTools,
    client_and_transport,
    load_trace,
    prompt_for,
    spec_for,
)

from tests.providers.anthropic_types import Weather

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def bodies(name: str) -> list[dict[str, Any]]:
    return [e.request.body for e in load_trace(FIXTURES / name).exchanges]  # type: ignore[misc]


def unmarked(value: Any) -> Any:
    """`value` without its breakpoints: what a block says, wherever the cache mark is."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def test_the_chart_conversation_round_trips(snapshot: Any) -> None:
    run = replay(FIXTURES / "chart.json")  # each request equal to the recorded one, or it fails
    assert (run.stop_reason, run.output) == (StopReason.completed, "Shanghai is warmer.")
    prompt, reply, results, _ = run.messages
    assert type(prompt) is UserMessage and isinstance(prompt.content, list)
    _, image, document = prompt.content
    assert image == Image(media_type="image/png", data=PNG)
    assert type(document) is Document and document.name == "report.pdf"
    assert type(results) is ToolResults
    assert results.results[0].content == [
        Text("chart of Shanghai"),
        Image(url="https://example.com/Shanghai.png"),
    ]
    first, second = bodies("chart.json")
    assert unmarked(second["messages"][0]) == unmarked(first["messages"][0])  # the prompt, again
    recorded = decode(load_trace(FIXTURES / "chart.json").exchanges[0].response.body)
    assert reply == AssistantMessage(recorded.content)
    assert second["messages"][1]["content"] == unmarked(
        load_trace(FIXTURES / "chart.json").exchanges[0].response.body["content"]  # type: ignore[index]
    )
    assert unmarked(second["messages"][2]["content"][0]["content"]) == [
        {"type": "text", "text": "chart of Shanghai"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/Shanghai.png"}},
    ]
    assert run.transcript() == snapshot


def test_a_wrong_answer_is_read_back_and_corrected(snapshot: Any) -> None:
    run = replay(FIXTURES / "final_answer.json")
    assert run.finish is not None and run.stop_reason is StopReason.finish_tool
    assert run.finish.output == Weather("Shanghai", 29)
    assert isinstance(run.finish.output, Weather)
    _, second = bodies("final_answer.json")
    assert second["tool_choice"] == {"type": "any"}
    assert unmarked(second["messages"][-1]["content"]) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01Fa2Nw6Xc9Rk3Tb7Ym5Qd8J",
            "content": "the answer does not fit its schema: Expected `int`, got `str` - at "
            "`$.temp_c`. Correct it and answer again.",
            "is_error": True,
        }
    ]
    assert run.transcript() == snapshot


def test_native_output_is_the_typed_answer() -> None:
    run = replay(FIXTURES / "native_output.json")
    assert run.finish is not None and run.finish.output == Weather("Shanghai", 29)
    (body,) = bodies("native_output.json")
    assert body["output_config"]["format"]["type"] == "json_schema"


def test_a_paused_turn_goes_on_with_the_server_blocks_sent_back() -> None:
    run = replay(FIXTURES / "web_search.stream.json", executor="trio")
    assert run.stop_reason is StopReason.completed and run.turns == 2
    paused = run.messages[1]
    assert type(paused) is AssistantMessage
    kinds = [p.data["type"] if type(p) is Opaque else type(p).__name__ for p in paused.content]
    assert kinds == ["Text", "server_tool_use", "web_search_tool_result"]
    _, second = bodies("web_search.stream.json")
    assert second["messages"][-1]["role"] == "assistant"
    assert unmarked(second["messages"][-1]["content"][1:]) == [
        p.data for p in paused.content if type(p) is Opaque
    ]
    answer = run.messages[2]
    assert type(answer) is AssistantMessage
    (cited,) = answer.content
    assert type(cited) is Text and len(cited.provider_data["citations"]) == 2


def test_a_prefill_is_continued() -> None:
    run = replay(FIXTURES / "prefill.json")
    assert run.output == 'Shanghai"}'
    (body,) = bodies("prefill.json")
    assert unmarked(body["messages"][-1]) == {
        "role": "assistant",
        "content": [{"type": "text", "text": '{"warmer": "'}],
    }


# -- a fallback from an OpenAI-compatible server to Anthropic after a tool ran ------------------

DEEPSEEK = "deepseek:deepseek-reasoner"
CLAUDE = "anthropic:claude-sonnet-4-5"


def thinking_rule_broken(body: dict[str, Any]) -> str | None:
    """What breaks the thinking rule of Anthropic's docs in `body`, or None: with extended
    thinking on, the assistant turn under way (every message since the last user message that
    is not all tool results) opens with a thinking or redacted_thinking block when it calls
    tools, since a tool-use loop is one turn with one thinking configuration."""
    if body.get("thinking", {}).get("type") != "enabled":
        return None
    turn: list[dict[str, Any]] = []
    for message in reversed(body["messages"]):
        content = message["content"]
        blocks = [{"type": "text"}] if isinstance(content, str) else content
        if message["role"] == "user" and any(b["type"] != "tool_result" for b in blocks):
            break
        turn.insert(0, message)
    replies = [m for m in turn if m["role"] == "assistant"]
    if not replies or not any(b["type"] == "tool_use" for b in replies[0]["content"]):
        return None
    opening = replies[0]["content"][0]["type"]
    if opening not in ("thinking", "redacted_thinking"):
        return f"Expected `thinking` or `redacted_thinking`, but found `{opening}`"
    return None


def test_the_thinking_rule_checker_finds_a_foreign_turn_with_thinking_on() -> None:
    (body,) = bodies("fallback_from_deepseek.json")
    assert thinking_rule_broken(body) is None
    on = {**body, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    assert (
        thinking_rule_broken(on) == "Expected `thinking` or `redacted_thinking`, but found "
        "`tool_use`"
    )
    for body in bodies("thinking.json"):
        assert thinking_rule_broken(body) is None


@pytest.mark.parametrize("executor", ["sync", "trio"])
def test_a_run_falls_back_from_deepseek_to_anthropic_after_a_tool_ran(executor: str) -> None:
    """DeepSeek reasons and calls tools, then fails past its retries; the run goes on on
    Anthropic, each request through the real SDK client equal to its recorded one, and every
    request valid: DeepSeek's carries its reasoning back, Anthropic's keep the thinking rule."""
    compat = load_trace(FIXTURES.parent / "compat" / "deepseek_fallback.stream.json")
    claude = load_trace(FIXTURES / "fallback_from_deepseek.json")
    is_sync = executor == "sync"
    chat, chat_wire = client_and_transport(compat, sync=is_sync)
    anthropic, anthropic_wire = client_and_transport(claude, sync=is_sync)
    spec = msgspec.structs.replace(spec_for(compat), models=(DEEPSEEK, CLAUDE))
    router = ModelRouter({DEEPSEEK: chat, CLAUDE: anthropic})
    prompt, tools = prompt_for(compat), RecordedTools(compat)
    if is_sync:
        run = sync.run(spec, prompt, model=router, tools=tools, sleep=lambda _: None)
    else:
        run = run_async(lambda: aio.run(spec, prompt, model=router, tools=tools), backend="trio")
    assert (run.stop_reason, chat_wire.remaining, anthropic_wire.remaining) == (
        StopReason.completed,
        [],
        [],
    )  # every recorded request asked for, each equal to what was sent
    assert run.output == text_of(decode(claude.exchanges[0].response.body).content)
    assert [type(e).__name__ for e in run.state.events if type(e).__name__.startswith("Model")] == [
        "ModelReplied",
        "ModelFailed",
        "ModelFailed",
        "ModelReplied",
    ]
    reasoned = run.messages[1]
    assert type(reasoned) is AssistantMessage and type(reasoned.content[0]) is Thinking
    for exchange in compat.exchanges[1:]:  # the turn's reasoning goes back to DeepSeek
        (sent,) = [m for m in exchange.request.body["messages"] if m["role"] == "assistant"]  # type: ignore[index]
        assert sent["reasoning_content"] == reasoned.content[0].text
    for exchange in claude.exchanges:
        body: dict[str, Any] = exchange.request.body  # type: ignore[assignment]
        assert thinking_rule_broken(body) is None
        assert body["thinking"] == {"type": "disabled"}  # said in the request, not left out
    # the user's next question is a new turn: Claude thinks again, DeepSeek's turn in history
    after = load_trace(FIXTURES / "thinking_after_fallback.json")
    claude_again, again_wire = client_and_transport(after)
    spec = msgspec.structs.replace(spec, models=(CLAUDE,))
    prompt = [*run.messages, UserMessage("再确认一下上海现在的天气。")]
    assert prompt == prompt_for(after)
    run = sync.run(
        spec, prompt, model=ModelRouter({CLAUDE: claude_again}), tools=RecordedTools(after)
    )
    assert (run.stop_reason, again_wire.remaining) == (StopReason.completed, [])
    assert type(run.messages[5].content[0]) is Thinking  # type: ignore[union-attr]
    for exchange in after.exchanges:
        body = exchange.request.body  # type: ignore[assignment]
        assert thinking_rule_broken(body) is None
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def test_a_deferred_tool_found_by_tool_search_runs_and_the_search_goes_back_in_place() -> None:
    run = replay(FIXTURES / "tool_search.json")
    assert run.stop_reason is StopReason.completed
    assert run.trajectory() == ["get_weather", "get_weather"]
    first, second = bodies("tool_search.json")
    assert [t.get("defer_loading") for t in first["tools"]] == [None, True]  # search first
    assert "cache_control" in first["tools"][0]  # the prefix ends before the deferred tool
    kinds = [b["type"] for b in second["messages"][1]["content"]]
    assert kinds == ["text", "server_tool_use", "tool_search_tool_result", "tool_use", "tool_use"]
