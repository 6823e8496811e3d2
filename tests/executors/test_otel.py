"""OpenTelemetry spans per the GenAI conventions: the weather fixture gives one span tree
(names, parents, attributes) through every executor, live and from the recorded run or its
journal; content only when asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from turnstile.core import Loop, LoopSpec, ModelError, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Journal, Run, ScriptedModel, sync
from turnstile.executors.otel import Tracing
from turnstile.executors.sandbox import Sandbox
from turnstile.executors.testing import replay

WEATHER = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic" / "weather.json"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


def tracing(exporter: InMemorySpanExporter, **options: object) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(
        "weather", model="claude-sonnet-4-5", provider="anthropic", tracer_provider=provider,
        **options,  # type: ignore[arg-type]
    )  # fmt: skip


def _in_order(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """Spans by start, then in the order they ended, except that the tool calls of one round
    (which trio may finish in any order) are listed by call id."""
    ordered = sorted(spans, key=lambda s: s.start_time or 0)  # stable: ended order kept
    out: list[ReadableSpan] = []
    tools: list[ReadableSpan] = []
    for s in [*ordered, None]:
        if s is not None and s.name.startswith("execute_tool"):
            tools.append(s)
            continue
        out += sorted(tools, key=lambda t: str((t.attributes or {})["gen_ai.tool.call.id"]))
        tools = []
        if s is not None:
            out.append(s)
    return out


def tree(spans: tuple[ReadableSpan, ...]) -> str:
    """The spans as an indented tree, each with its attributes; checks every child lies within
    its parent's time."""
    by_id = {s.context.span_id: s for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None else None
        assert parent is None or parent in by_id, f"{s.name}'s parent was not exported"
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def show(s: ReadableSpan, depth: int) -> None:
        assert s.start_time is not None and s.end_time is not None
        assert s.start_time <= s.end_time
        lines.append("  " * depth + s.name + ("  [ERROR]" if not s.status.is_ok else ""))
        for key, value in sorted((s.attributes or {}).items()):
            shown = list(value) if isinstance(value, tuple) else value
            lines.append("  " * depth + f"  · {key} = {shown!r}")
        for kid in _in_order(children.get(s.context.span_id, [])):
            assert kid.start_time is not None and kid.end_time is not None
            assert s.start_time <= kid.start_time and kid.end_time <= s.end_time
            show(kid, depth + 1)

    for root in children.get(None, []):
        show(root, 0)
    return "\n".join(lines)


def traced(exporter: InMemorySpanExporter, executor: str, tools: Any = None) -> tuple[str, Run]:
    with tracing(exporter).run(epoch_ns=0) as on_event:
        run = replay(WEATHER, executor=executor, tools=tools, on_event=on_event)  # type: ignore[arg-type]
    spans = exporter.get_finished_spans()
    exporter.clear()
    return tree(spans), run


def test_the_weather_run_gives_one_span_tree_through_every_executor(
    exporter: InMemorySpanExporter, tmp_path: Path, snapshot
) -> None:
    by_sync, run = traced(exporter, "sync")
    assert traced(exporter, "trio")[0] == by_sync
    assert traced(exporter, "asyncio")[0] == by_sync
    with Sandbox(["tests.executors.conformance_tools:get_weather"]) as box:
        assert traced(exporter, "sync", box)[0] == by_sync
    assert by_sync == snapshot
    # afterwards, from the run, and from its journal: the same spans, at the same times
    live = {(s.name, s.start_time, s.end_time) for s in traced_spans(exporter, run)}
    tracing(exporter).record(run, epoch_ns=0)
    assert tree(exporter.get_finished_spans()) == by_sync
    assert {(s.name, s.start_time, s.end_time) for s in exporter.get_finished_spans()} == live
    exporter.clear()
    path = tmp_path / "run.journal"
    with Journal(path) as journal:
        for event in run.state.events:
            journal.append(event)
    tracing(exporter).record(path)
    assert tree(exporter.get_finished_spans()) == by_sync


def traced_spans(exporter: InMemorySpanExporter, run: Run) -> tuple[ReadableSpan, ...]:
    with tracing(exporter).run(epoch_ns=0) as on_event:
        for event in run.state.events:
            on_event(event)
    spans = exporter.get_finished_spans()
    exporter.clear()
    return spans


def test_content_is_recorded_only_when_asked_for(exporter: InMemorySpanExporter) -> None:
    replay(WEATHER)  # nothing traced: no tracer given
    with tracing(exporter).run() as on_event:
        replay(WEATHER, on_event=on_event)
    keys = {k for s in exporter.get_finished_spans() for k in (s.attributes or {})}
    assert not {k for k in keys if "messages" in k or "arguments" in k or "result" in k}
    exporter.clear()
    with tracing(exporter, capture_content=True).run() as on_event:
        replay(WEATHER, on_event=on_event)
    spans = {s.name: s.attributes or {} for s in exporter.get_finished_spans()}
    assert "北京和上海哪个更暖和" in str(spans["invoke_agent weather"]["gen_ai.input.messages"])
    assert "上海" in str(spans["chat claude-sonnet-4-5"]["gen_ai.output.messages"])
    assert "温度" in str(spans["execute_tool get_weather"]["gen_ai.tool.call.result"])


def no_wait(seconds: float) -> None:
    pass


def test_a_failed_model_call_and_a_failed_tool_are_errors(exporter: InMemorySpanExporter) -> None:
    def broken(city: str) -> str:
        raise ValueError(city)

    calls = ModelResponse([ToolCall("c1", "broken", {"city": "x"})], ModelStop.tool_use)
    model = ScriptedModel(
        [
            ModelError("overloaded", retryable=True, kind="overloaded"),
            calls,
            ModelResponse([Text("sorry")], ModelStop.end_turn, Usage(10, 2, cache_read_tokens=8)),
        ]
    )
    with tracing(exporter).run() as on_event:
        sync.run(
            LoopSpec(), "hi", model=model, tools=[broken], on_event=on_event, sleep=lambda s: None
        )
    spans = exporter.get_finished_spans()
    tree(spans)  # on a real clock: every span within the run's
    failed = [s for s in spans if not s.status.is_ok]
    assert [(s.name, (s.attributes or {})["error.type"]) for s in failed] == [
        ("chat claude-sonnet-4-5", "overloaded"),
        ("execute_tool broken", "tool_error"),
    ]
    [root] = [s for s in spans if s.parent is None]
    assert (root.attributes or {})["gen_ai.usage.cache_read.input_tokens"] == 8


def test_an_exception_leaving_the_block_marks_the_run_an_error(
    exporter: InMemorySpanExporter,
) -> None:
    with pytest.raises(KeyError), tracing(exporter).run() as on_event:
        replay(WEATHER, on_event=on_event)
        raise KeyError("after the run")
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert (root.attributes or {})["error.type"] == "KeyError"


def test_a_resumed_run_has_its_span_from_its_first_event(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    path = tmp_path / "run.journal"
    with Journal(path) as journal:  # a run that crashed before its first model call
        loop = Loop(LoopSpec(tools=(get_weather.spec,)))
        loop.start("北京呢?", 0.0)
        journal.append(loop.state.events[0])
    reply = ModelResponse([ToolCall("c1", "get_weather", {"city": "北京"})], ModelStop.tool_use)
    model = ScriptedModel([reply, ModelResponse([Text("26 度")], ModelStop.end_turn)])
    with tracing(exporter).run() as on_event:
        sync.run(loop.spec, model=model, tools=[get_weather], journal=path, on_event=on_event)
    assert tree(exporter.get_finished_spans()).splitlines()[0] == "invoke_agent weather"
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == [
        "chat claude-sonnet-4-5",
        "execute_tool get_weather",
        "chat claude-sonnet-4-5",
        "invoke_agent weather",
    ]


@tool
def get_weather(city: str) -> str:
    """The weather of a city"""
    return "26"


def test_each_chat_span_names_the_model_its_call_went_to(exporter: InMemorySpanExporter) -> None:
    """With fallback models, the model a call asked is the event's, not the tracer's default."""
    spec = LoopSpec(models=("first", "second"))
    model = ScriptedModel(
        [
            *[ModelError("overloaded", retryable=True, kind="overloaded")] * 4,
            ModelResponse([Text("hello")], ModelStop.end_turn),
        ]
    )
    with tracing(exporter).run() as on_event:
        sync.run(spec, "hi", model=model, on_event=on_event, sleep=lambda s: None)
    chats = [s for s in _in_order(list(exporter.get_finished_spans())) if s.name.startswith("chat")]
    named = [(s.name, (s.attributes or {})["gen_ai.request.model"]) for s in chats]
    assert named[0] == ("chat first", "first")
    assert named[-1] == ("chat second", "second")


def test_a_run_ending_in_a_model_error_is_an_error_naming_it(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([ModelError("invalid x-api-key", kind="authentication_error")])
    with tracing(exporter).run() as on_event:
        run = sync.run(LoopSpec(), "hi", model=model, on_event=on_event)
    assert run.stop_reason.value == "model_error"
    spans = exporter.get_finished_spans()
    assert {s.name: (s.attributes or {}).get("error.type") for s in spans} == {
        "invoke_agent weather": "authentication_error",
        "chat claude-sonnet-4-5": "authentication_error",
    }
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    exporter.clear()
    tracing(exporter).record(run)  # from the recorded run: the same
    assert all(s.status.status_code is StatusCode.ERROR for s in exporter.get_finished_spans())


def test_a_run_that_recovered_from_a_failed_call_is_no_error(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel(
        [
            ModelError("overloaded", retryable=True, kind="overloaded"),
            ModelResponse([Text("hi")], ModelStop.end_turn),
        ]
    )
    with tracing(exporter).run() as on_event:
        sync.run(LoopSpec(), "hi", model=model, on_event=on_event, sleep=no_wait)
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert root.status.is_ok and "error.type" not in (root.attributes or {})


def test_captured_content_holds_the_system_instructions(exporter: InMemorySpanExporter) -> None:
    spec = LoopSpec(system="你是一个天气助手。")
    model = ScriptedModel([ModelResponse([Text("好")], ModelStop.end_turn)])
    with tracing(exporter, capture_content=True).run(spec=spec) as on_event:
        run = sync.run(spec, "hi", model=model, on_event=on_event)
    expected = '[{"type":"text","content":"你是一个天气助手。"}]'
    live = {s.name: (s.attributes or {}) for s in exporter.get_finished_spans()}
    assert [a["gen_ai.system_instructions"] for a in live.values()] == [expected] * 2
    exporter.clear()
    tracing(exporter, capture_content=True).record(run)  # a Run knows its spec
    recorded = {s.name: (s.attributes or {}) for s in exporter.get_finished_spans()}
    assert recorded == live
    exporter.clear()
    with tracing(exporter).run(spec=spec) as on_event:
        sync.run(
            spec,
            "hi",
            model=ScriptedModel([ModelResponse([Text("好")], ModelStop.end_turn)]),
            on_event=on_event,
        )
    keys = {k for s in exporter.get_finished_spans() for k in (s.attributes or {})}
    assert "gen_ai.system_instructions" not in keys  # content only when asked for


def test_chat_spans_say_which_reply_which_model_and_which_server(
    exporter: InMemorySpanExporter,
) -> None:
    import anthropic
    from turnstile.providers import anthropic_messages

    sdk = anthropic.Anthropic(api_key="k", base_url="https://gateway.example:8443")
    client = anthropic_messages.Client(sdk, model="claude-sonnet-4-5")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Tracing("weather", client=client, tracer_provider=provider).run() as on_event:
        replay(WEATHER, on_event=on_event)
    chats = [s.attributes or {} for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert [(a["gen_ai.response.id"], a["gen_ai.response.model"]) for a in chats] == [
        ("msg_01Q5Kc2pXh7vRz9dWmYt3LbN", "claude-sonnet-4-5-20250929"),
        ("msg_01HwX8e4TnJq6sVaUk2rPfGd", "claude-sonnet-4-5-20250929"),
    ]
    assert all(a["server.address"] == "gateway.example" and a["server.port"] == 8443 for a in chats)
    assert all(a["gen_ai.request.model"] == "claude-sonnet-4-5" for a in chats)
