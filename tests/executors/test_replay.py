"""Whole loops replayed from the fixtures: real loop, real executor, real SDK client, no network."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from syrupy.extensions.amber import AmberSnapshotExtension
from syrupy.location import PyTestLocation
from syrupy.types import SnapshotIndex
from turnstile.core import (
    Command,
    ModelFailed,
    ModelReplied,
    Observation,
    StopReason,
)
from turnstile.core.messages import (
    validate_history,
)
from turnstile.executors import Run, transcript
from turnstile.executors.testing import replay
from turnstile.providers.replay import (
    RecordedTools,
    ReplayMismatch,
    Trace,
    TraceError,
    client_for,
    load_trace,
    spec_for,
)

from tests.steps import call_ids, run_log, step_line

from .backoff import retries_wait

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

FINISHES = {
    "anthropic/cache_off.json": StopReason.completed,
    "anthropic/chart.json": StopReason.completed,
    "anthropic/fallback.json": StopReason.completed,
    "anthropic/fallback_from_deepseek.json": StopReason.completed,
    "anthropic/final_answer.json": StopReason.finish_tool,
    "anthropic/finalize.json": StopReason.max_turns,
    "anthropic/malformed_args.json": StopReason.completed,
    "anthropic/max_tokens_tool.stream.json": StopReason.completed,
    "anthropic/native_output.json": StopReason.completed,
    "anthropic/output_native.stream.json": StopReason.completed,
    "anthropic/output_tool.stream.json": StopReason.finish_tool,
    "anthropic/overloaded.stream.json": StopReason.completed,
    "anthropic/prefill.json": StopReason.completed,
    "anthropic/refusal.json": StopReason.refusal,
    "anthropic/strict_tool.json": StopReason.completed,
    "anthropic/thinking.json": StopReason.completed,
    "anthropic/thinking_after_fallback.json": StopReason.completed,
    "anthropic/tool_error.json": StopReason.completed,
    "anthropic/tool_search.json": StopReason.completed,
    "anthropic/trip.json": StopReason.completed,
    "clouds/azure_chat_weather.json": StopReason.completed,
    "compat/deepseek_fallback.stream.json": StopReason.model_error,
    "compat/deepseek_weather.stream.json": StopReason.completed,
    "compat/lmstudio_weather.stream.json": StopReason.completed,
    "compat/ollama_bare_calls.stream.json": StopReason.completed,
    "compat/ollama_weather.json": StopReason.completed,
    "compat/openrouter_weather.json": StopReason.completed,
    "compat/vllm_weather.stream.json": StopReason.completed,
    "clouds/azure_chat_weather.stream.json": StopReason.completed,
    "clouds/azure_responses_weather.json": StopReason.completed,
    "clouds/bedrock_weather.json": StopReason.completed,
    "clouds/vertex_weather.json": StopReason.completed,
    "clouds/vertex_weather.stream.json": StopReason.completed,
    "anthropic/unknown_stop.json": StopReason.completed,
    "anthropic/weather.json": StopReason.completed,
    "anthropic/weather.stream.json": StopReason.completed,
    "anthropic/web_search.stream.json": StopReason.completed,
    "openai-chat/audio.json": StopReason.completed,
    "openai-chat/azure_prompt_filter.stream.json": StopReason.completed,
    "openai-chat/cache_off.json": StopReason.completed,
    "openai-chat/client_history.json": StopReason.completed,
    "openai-chat/content_filter.json": StopReason.refusal,
    "openai-chat/instructions.json": StopReason.completed,
    "openai-chat/malformed_args.json": StopReason.completed,
    "openai-chat/max_tokens_field.json": StopReason.completed,
    "openai-chat/max_tokens_tool.stream.json": StopReason.max_turns,
    "openai-chat/media.json": StopReason.completed,
    "openai-chat/output_native.json": StopReason.completed,
    "openai-chat/output_native.stream.json": StopReason.completed,
    "openai-chat/output_tool.json": StopReason.finish_tool,
    "openai-chat/output_tool.stream.json": StopReason.finish_tool,
    "openai-chat/overloaded.stream.json": StopReason.completed,
    "openai-chat/refusal.json": StopReason.refusal,
    "openai-chat/tool_error.json": StopReason.completed,
    "openai-chat/unknown_stop.json": StopReason.completed,
    "openai-chat/weather.json": StopReason.completed,
    "openai-chat/weather.stream.json": StopReason.completed,
    "openai-chat/web_search.json": StopReason.completed,
    "openai-responses/background_resumed.stream.json": StopReason.completed,
    "openai-responses/cache_off.json": StopReason.completed,
    "openai-responses/instructions.json": StopReason.completed,
    "openai-responses/malformed_args.json": StopReason.completed,
    "openai-responses/max_tokens_tool.stream.json": StopReason.completed,
    "openai-responses/media.json": StopReason.completed,
    "openai-responses/output_native.json": StopReason.completed,
    "openai-responses/output_native.stream.json": StopReason.completed,
    "openai-responses/output_tool.json": StopReason.finish_tool,
    "openai-responses/output_tool.stream.json": StopReason.finish_tool,
    "openai-responses/overloaded.stream.json": StopReason.completed,
    "openai-responses/reasoning.json": StopReason.completed,
    "openai-responses/refusal.json": StopReason.refusal,
    "openai-responses/stored.json": StopReason.completed,
    "openai-responses/tool_error.json": StopReason.completed,
    "openai-responses/tool_search.json": StopReason.completed,
    "openai-responses/unknown_stop.json": StopReason.completed,
    "openai-responses/weather.json": StopReason.completed,
    "openai-responses/weather.stream.json": StopReason.completed,
    "openai-responses/web_search.stream.json": StopReason.completed,
}
WEATHER = [
    f"{provider}/{name}"
    for provider in ("anthropic", "openai-chat", "openai-responses")
    for name in ("weather.json", "weather.stream.json")
]


def replayed(name: str, *, quote_texts: bool = False) -> tuple[Run, list[str]]:
    steps: list[Command | Observation] = []
    run = replay(FIXTURES / name, on_step=steps.append)
    return run, [step_line(s, quote_texts=quote_texts) for s in steps]


def test_the_table_names_every_fixture() -> None:
    assert sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.json")) == sorted(
        FINISHES
    )


@pytest.mark.parametrize("name", sorted(FINISHES))
def test_each_fixture_replays_through_the_sync_executor(name: str, snapshot: Any) -> None:
    run, steps = replayed(name)
    assert run.stop_reason is FINISHES[name]
    assert run.finish is not None and run.finish.reason is FINISHES[name]
    validate_history(run.messages)
    assert run_log(steps, run.state) == snapshot


COLD_REPLAYS = """
import json, sys
import msgspec
from turnstile.core.messages import validate_history
from turnstile.executors import transcript
from turnstile.executors.testing import replay

executor, fixtures, *names = sys.argv[1:]
done = {}
for name in names:
    try:
        run = replay(f"{fixtures}/{name}", executor=executor)
        validate_history(run.messages)
        done[name] = [run.stop_reason.value, msgspec.json.encode(run.messages).decode(),
                      transcript(run.state)]
    except Exception as e:
        done[name] = [f"{type(e).__name__}: {e}"]
print(json.dumps(done))
"""


@pytest.mark.parametrize("executor", ["asyncio", "trio"])
def test_each_fixture_replays_through_the_async_executor_from_a_cold_start(executor: str) -> None:
    """In a fresh process, where an SDK's first request still does one-time work in a worker
    thread: virtual time waits for it, and every replay runs as the sync executor's does."""
    names = sorted(FINISHES)
    child = subprocess.run(
        [sys.executable, "-c", COLD_REPLAYS, executor, str(FIXTURES), *names],
        cwd=FIXTURES.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    cold = json.loads(child.stdout)
    for name in names:
        reference = replay(FIXTURES / name)
        expected = [
            FINISHES[name].value,
            msgspec.json.encode(reference.messages).decode(),
            transcript(reference.state),
        ]
        assert cold[name] == expected, name


class _Shared(AmberSnapshotExtension):
    """Names a snapshot by the test function and `name=` alone, so every parameter of a
    parametrized test asserts the same one."""

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        return f"{test_location.methodname}[{index}]"


def _neutral(lines: list[str], run: Run) -> str:
    """The steps with the provider's call ids replaced by their order: call-1, call-2, ..."""
    text = "\n".join(lines)
    for n, call_id in enumerate(dict.fromkeys(call_ids(run.messages)), 1):
        text = text.replace(call_id, f"call-{n}")
    return text


@pytest.mark.parametrize("name", WEATHER)
def test_one_loop_three_formats(name: str, snapshot: Any) -> None:
    """The weather conversation gives the same commands and observations over every format,
    streamed or not, reply texts included: every trace words its replies the same way.
    """
    run, steps = replayed(name, quote_texts=True)
    assert run.stop_reason is StopReason.completed
    shared = snapshot.use_extension(_Shared)(name="weather")
    assert _neutral(steps, run) == shared


def test_a_changed_prompt_fails_with_a_diff() -> None:
    trace = load_trace(FIXTURES / "anthropic/weather.json")
    assert trace.loop is not None
    trace.loop["prompt"] = "北京和广州哪个更暖和?"
    with pytest.raises(ReplayMismatch) as info:
        replay(trace)
    message = str(info.value)
    assert "request 1 (POST /v1/messages) does not match the recorded POST /v1/messages" in message
    assert '-          "text": "北京和上海哪个更暖和?",' in message
    assert '+          "text": "北京和广州哪个更暖和?",' in message


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_a_changed_tool_output_fails_on_the_next_request(executor: Any) -> None:
    trace = load_trace(FIXTURES / "openai-responses/weather.json")
    assert trace.loop is not None
    outputs = trace.loop["tool_outputs"]
    first = next(iter(outputs))
    outputs[first] = {**outputs[first], "content": '{"温度":-5}'}
    with pytest.raises(ReplayMismatch, match=r'(?s)request 2 .*\+ +"output": "\{\\"温度\\":-5\}"'):
        replay(trace, executor=executor)


def test_exchanges_left_over_fail_the_replay() -> None:
    trace = load_trace(FIXTURES / "openai-chat/weather.json")
    trace.exchanges.append(trace.exchanges[-1])
    with pytest.raises(ReplayMismatch, match=r"ended \(completed\) after 2 of 3 exchanges"):
        replay(trace)


def refused_at_first(path: Path) -> Trace:
    """The trace, its first request answered with a 401 instead."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["exchanges"][0]["response"] = {
        "status": 401,
        "headers": {"content-type": "application/json"},
        "body": {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        },
    }
    return msgspec.convert(data, Trace)


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_a_run_that_ends_early_says_why_and_what_it_did(executor: Any) -> None:
    with pytest.raises(ReplayMismatch) as info:
        replay(refused_at_first(FIXTURES / "anthropic/weather.json"), executor=executor)
    message = str(info.value)
    assert (
        "the run ended (model_error) after 1 of 2 exchanges, because model-1 failed: "
        "authentication_error: invalid x-api-key (HTTP 401); the next was POST /v1/messages"
    ) in message
    assert "user: 北京和上海哪个更暖和?" in message  # the transcript of the run until then


def test_a_changed_request_comes_with_the_run_until_then() -> None:
    trace = load_trace(FIXTURES / "openai-responses/weather.json")
    assert trace.loop is not None
    outputs = trace.loop["tool_outputs"]
    first = next(iter(outputs))
    outputs[first] = {**outputs[first], "content": '{"温度":-5}'}
    with pytest.raises(ReplayMismatch) as info:
        replay(trace)
    assert '← get_weather: {"温度":-5}' in str(info.value)


def test_a_tool_call_without_a_recorded_output_is_an_error_result() -> None:
    tools = RecordedTools(load_trace(FIXTURES / "anthropic/tool_error.json"))
    outcome = tools.run("get_weather", {"city": "广州"})
    assert outcome.is_error and "no recorded output for get_weather" in outcome.content
    assert tools.unrecorded == ['get_weather {"city": "广州"}']


def test_a_tool_call_without_a_recorded_output_fails_the_replay() -> None:
    trace = load_trace(FIXTURES / "anthropic/finalize.json")
    assert trace.loop is not None
    trace.loop["tool_outputs"] = {}
    with pytest.raises(ReplayMismatch, match="request 2"):  # its error result is sent
        replay(trace)
    trace.loop["guards"] = {"max_turns": 1, "finalize": False}  # so no request follows it
    del trace.exchanges[1:]
    with pytest.raises(
        ReplayMismatch, match=r'no recorded output for: get_weather \{"city": "北京"'
    ):
        replay(trace)


def test_recorded_tools_answer_identical_calls_in_recorded_order() -> None:
    trace = load_trace(FIXTURES / "anthropic/weather.json")
    assert trace.loop is not None
    body = trace.exchanges[0].response.body
    for block in body["content"]:
        if block["type"] == "tool_use":
            block["input"] = {"city": "北京"}
    outputs = trace.loop["tool_outputs"]
    tools = RecordedTools(trace)
    got = [tools.run("get_weather", {"city": "北京"}).content for _ in range(2)]
    assert got == [o["content"] for o in outputs.values()]
    assert tools.run("get_weather", {"city": "北京"}).is_error


def test_spec_and_client_come_from_the_loop_section() -> None:
    trace = load_trace(FIXTURES / "anthropic/thinking.json")
    spec = spec_for(trace)
    assert (spec.system, spec.max_tokens) == ("你是一个天气助手。", 2048)
    assert [t.name for t in spec.tools] == ["get_weather"]
    client = client_for(trace)
    assert (client.model, client.stream, client.is_async) == ("claude-sonnet-4-5", False, False)
    assert client.options == {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    streamed = client_for(load_trace(FIXTURES / "anthropic/weather.stream.json"), sync=False)
    assert (streamed.stream, streamed.is_async) == (True, True)
    assert spec_for(load_trace(FIXTURES / "anthropic/finalize.json")).guards.max_turns == 1


@pytest.mark.parametrize(
    ("loop", "message"),
    [
        (None, "no `loop` section"),
        ({"prompt": "hi"}, "loop: Object missing required field `model`"),
        ({"model": "m", "prompt": "hi", "guards": {"max_turns": "x"}}, "loop.guards: Expected"),
        ({"model": "m", "prompt": "hi", "tolls": []}, "unknown field `tolls`"),
    ],
)
def test_a_trace_without_a_usable_loop_section_is_a_trace_error(
    loop: dict[str, Any] | None, message: str
) -> None:
    trace = msgspec.convert({"provider": "anthropic", "hand_written": True, "loop": loop}, Trace)
    with pytest.raises(TraceError, match=message):
        replay(trace)


@pytest.mark.parametrize("where", ["loop", "body"])
def test_a_trace_file_nested_thousands_deep_is_a_trace_error(tmp_path: Path, where: str) -> None:
    text = (FIXTURES / "anthropic/weather.json").read_text()
    bomb = "[" * 3000 + "]" * 3000
    key = '"loop": ' if where == "loop" else '"body": '
    path = tmp_path / "deep.json"
    path.write_text(text.replace(key + "{", key + '{"deep": ' + bomb + ", ", 1))
    with pytest.raises(TraceError, match="nested deeper"):
        replay(path)


def test_replay_takes_a_path_or_a_trace_and_leaves_the_trace_untouched() -> None:
    trace = load_trace(FIXTURES / "openai-chat/weather.stream.json")
    before = copy.deepcopy(msgspec.to_builtins(trace))
    assert (
        replay(trace).messages == replay(str(FIXTURES / "openai-chat/weather.stream.json")).messages
    )
    assert msgspec.to_builtins(trace) == before


def test_an_unknown_executor_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown executor 'curio'"):
        replay(FIXTURES / "anthropic/weather.json", executor="curio")  # type: ignore[arg-type]


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_a_replay_waits_for_a_retry_on_a_virtual_clock(
    monkeypatch: pytest.MonkeyPatch, executor: Any
) -> None:
    retries_wait(monkeypatch, 30.0)
    began = time.monotonic()
    run = replay(FIXTURES / "anthropic" / "overloaded.stream.json", executor=executor)
    assert time.monotonic() - began < 10  # thirty seconds of the replay's time, not of ours
    failed, retried = [e for e in run.state.events if type(e) in (ModelFailed, ModelReplied)][:2]
    assert type(failed) is ModelFailed and retried.now - failed.now == pytest.approx(30.0)
