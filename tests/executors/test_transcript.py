"""Transcripts tell the run in the order it happened, and never contradict its state."""

from __future__ import annotations

import json

from turnstile.core import (
    Cancelled,
    GuardrailChecked,
    Guards,
    Loop,
    LoopSpec,
    ModelError,
    ModelReplied,
    ToolSpec,
    tool,
)
from turnstile.core.guardrails import Guardrail
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    Usage,
    UserMessage,
)
from turnstile.executors import Edit, ScriptedModel, sync, transcript


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


@tool
def cat() -> str:
    """Two lines."""
    return "line one\nline two"


def calls(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(list(calls), ModelStop.tool_use, Usage(10, 5))


def text(t: str) -> ModelResponse:
    return ModelResponse([Text(t)], ModelStop.end_turn, Usage(10, 5))


def lines(*lines: str) -> str:
    return "\n".join(lines)


def test_approvals_and_denials_come_at_their_turn() -> None:
    spec = LoopSpec(tools=(delete.spec,))
    script = [
        calls(ToolCall("d1", "delete", {"path": "a"})),
        calls(ToolCall("d2", "delete", {"path": "b"})),
        text("done"),
    ]
    answers = iter([True, "not b"])
    run = sync.run(
        spec,
        "clean up",
        model=ScriptedModel(script),
        tools=[delete],
        approve=lambda c: next(answers),
    )
    assert run.transcript() == lines(
        "user: clean up",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        '  → delete {"path": "a"}',
        "  ✓ approved delete (d1)",
        "  ← delete: deleted a",
        "── turn 2 · tool_use · 10 in / 5 out ──",
        '  → delete {"path": "b"}',
        "  ✗ denied delete (d2): not b",
        "  ✗ delete: denied by a human: not b. Do not retry it.",
        "── turn 3 · end_turn · 10 in / 5 out ──",
        "assistant: done",
        "── completed after 3 turns · 30 in / 15 out ──",
    )


def test_an_edited_approval_shows_the_call_as_made_then_the_edit_it_ran_with() -> None:
    script = [calls(ToolCall("d1", "delete", {"path": "a"})), text("done")]
    run = sync.run(LoopSpec(tools=(delete.spec,)), "clean up", model=ScriptedModel(script),
                   tools=[delete], approve=lambda c: Edit({"path": "b"}))  # fmt: skip
    assert run.transcript() == lines(
        "user: clean up",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        '  → delete {"path": "a"}',
        '  ✓ approved delete (d1), edited: {"path": "b"}',
        '  ← delete: (a person approved this call with its arguments changed to {"path":"b"}; '
        "this is the result of the call as changed)",
        "    deleted b",
        "── turn 2 · end_turn · 10 in / 5 out ──",
        "assistant: done",
        "── completed after 2 turns · 20 in / 10 out ──",
    )


def test_a_failed_model_call_comes_before_the_reply_that_retried_it() -> None:
    script = [
        calls(ToolCall("c", "add", {"a": 1, "b": 2})),
        ModelError("overloaded", retryable=True),
        text("3"),
    ]
    spec = LoopSpec(guards=Guards(max_model_retries=1))
    run = sync.run(spec, "1+2?", model=ScriptedModel(script), tools=[add])
    assert run.transcript() == lines(
        "user: 1+2?",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        '  → add {"a": 1, "b": 2}',
        "  ← add: 3",
        "! model-2 failed (retryable): overloaded",
        "── turn 2 · end_turn · 10 in / 5 out ──",
        "assistant: 3",
        "── completed after 2 turns · 20 in / 10 out ──",
    )


def test_a_cancel_comes_after_the_results_it_wrote() -> None:
    loop = Loop(LoopSpec(tools=(add.spec,)))
    [ask] = loop.start("1+2?", 0.0)
    loop.send(ModelReplied(ask.id, calls(ToolCall("c", "add", {"a": 1, "b": 2})), now=1.0))
    loop.send(Cancelled("Ctrl-C", now=2.0))
    assert transcript(loop.state) == lines(
        "user: 1+2?",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        '  → add {"a": 1, "b": 2}',
        "  ✗ add: no result: the run was cancelled (Ctrl-C) before this call returned",
        "! cancelled: Ctrl-C",
        "── cancelled after 1 turn · 10 in / 5 out ──",
    )


def test_multi_line_text_keeps_its_indentation() -> None:
    script = [calls(ToolCall("c", "cat", {})), text("first\nsecond")]
    run = sync.run(LoopSpec(), "cat", model=ScriptedModel(script), tools=[cat])
    assert run.transcript() == lines(
        "user: cat",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        "  → cat {}",
        "  ← cat: line one",
        "    line two",
        "── turn 2 · end_turn · 10 in / 5 out ──",
        "assistant: first",
        "  second",
        "── completed after 2 turns · 20 in / 10 out ──",
    )


@tool
def local_weather(city: str) -> dict[str, object]:
    """A local tool: its dict goes to the model as compact JSON."""
    return {"city": city, "温度": 26}


@tool
def served_weather(city: str) -> str:
    """As an MCP server sends the same: JSON text, pretty-printed."""
    return json.dumps({"city": city, "温度": 26}, ensure_ascii=False, indent=2)


def test_a_json_result_reads_on_one_line_whichever_tool_gave_it() -> None:
    script = [
        calls(
            ToolCall("a", "local_weather", {"city": "北京"}),
            ToolCall("b", "served_weather", {"city": "北京"}),
        ),
        text("26"),
    ]
    tools = [local_weather, served_weather]
    run = sync.run(LoopSpec(), "weather?", model=ScriptedModel(script), tools=tools)
    shown = run.transcript().splitlines()
    assert '  ← local_weather: {"city":"北京","温度":26}' in shown
    assert '  ← served_weather: {"city":"北京","温度":26}' in shown


def test_the_final_answer_is_not_counted_as_a_turn_by_the_headings_or_the_footer() -> None:
    script = [calls(ToolCall("c", "add", {"a": 1, "b": 2})), text("3")]
    spec = LoopSpec(guards=Guards(max_turns=1, finalize_prompt="Answer now."))
    run = sync.run(spec, "1+2?", model=ScriptedModel(script), tools=[add])
    assert run.turns == 1
    assert run.transcript() == lines(
        "user: 1+2?",
        "── turn 1 · tool_use · 10 in / 5 out ──",
        '  → add {"a": 1, "b": 2}',
        "  ← add: 3",
        "user: Answer now.",
        "── final answer · end_turn · 10 in / 5 out ──",
        "assistant: 3",
        "── max_turns after 1 turn · 20 in / 10 out ──",
    )


def test_a_reply_given_in_the_prompt_is_not_a_turn() -> None:
    prompt = [UserMessage("hi"), AssistantMessage([Text("hello")]), UserMessage("and now?")]
    run = sync.run(LoopSpec(), prompt, model=ScriptedModel([text("now this")]))
    assert run.transcript() == lines(
        "user: hi",
        "── given in the prompt ──",
        "assistant: hello",
        "user: and now?",
        "── turn 1 · end_turn · 10 in / 5 out ──",
        "assistant: now this",
        "── completed after 1 turn · 10 in / 5 out ──",
    )


def test_guardrail_checks_and_a_trip_come_where_they_were_answered() -> None:
    spec = LoopSpec(
        tools=[ToolSpec("rm")],
        guardrails=[Guardrail("pii", "input"), Guardrail("safe", "tool_call")],
    )
    loop = Loop(spec)
    loop.start("clean up", now=0.0)
    reply = ModelResponse([ToolCall("c1", "rm", {"path": "/"})], ModelStop.tool_use)
    loop.send(ModelReplied("model-1", reply, now=1.0))
    loop.send(GuardrailChecked("model-1/input/pii", False, now=2.0))
    loop.send(GuardrailChecked("c1/tool_call/safe", True, "not /", now=3.0))
    assert transcript(loop.state).splitlines()[3:] == [
        "  ✓ guardrail model-1/input/pii passed",
        "  ✗ guardrail c1/tool_call/safe tripped: not /",
        "  ✗ rm: not run: the guardrail safe tripped: not /",
        "── guardrail after 1 turn · 0 in / 0 out ──",
    ]
