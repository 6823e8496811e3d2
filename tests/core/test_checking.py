"""The guardrails' side of a step: checks asked beside the first model call, a round or an
answer held until its checks pass, a trip that finishes the run, and checks handed out again."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import (
    CallModel,
    CheckGuardrail,
    Finish,
    GuardrailChecked,
    InvalidSpec,
    Loop,
    LoopSpec,
    ModelReplied,
    ProtocolError,
    Resumed,
    RunTool,
    StopReason,
    Tick,
    ToolSpec,
)
from turnstile.core.guardrails import FinalAnswer, Guardrail, guardrail
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall

RAILS = (Guardrail("pii", "input"), Guardrail("safe", "tool_call"), Guardrail("tone", "final"))
SPEC = LoopSpec(tools=(ToolSpec("rm"),), guardrails=RAILS)
TWO_CALLS = ModelResponse(
    [ToolCall("c1", "rm", {"path": "/"}), ToolCall("c2", "rm", {"path": "/tmp"})],
    ModelStop.tool_use,
)


def kinds(commands: list[object]) -> list[str]:
    return [f"{type(c).__name__} {getattr(c, 'id', '')}".strip() for c in commands]


def test_the_input_is_checked_beside_the_first_model_call_only() -> None:
    loop = Loop(SPEC)
    first = loop.start("hi", 0.0)
    assert kinds(first) == ["CallModel model-1", "CheckGuardrail model-1/input/pii"]
    assert first[1].subject == loop.state.messages  # type: ignore[union-attr]


def test_no_call_of_a_round_runs_before_every_check_of_it_and_of_the_input_passed() -> None:
    loop = Loop(SPEC)
    loop.start("hi", 0.0)
    asked = loop.send(ModelReplied("model-1", TWO_CALLS, now=1.0))
    assert kinds(asked) == ["CheckGuardrail c1/tool_call/safe", "CheckGuardrail c2/tool_call/safe"]
    assert asked[0].subject == TWO_CALLS.content[0]  # type: ignore[union-attr]
    assert loop.state.phase == "checking"
    assert loop.send(GuardrailChecked("c1/tool_call/safe", False, now=2.0)) == []
    assert loop.send(GuardrailChecked("c2/tool_call/safe", False, now=3.0)) == []
    started = loop.send(GuardrailChecked("model-1/input/pii", False, now=4.0))
    assert [type(c) for c in started] == [RunTool, RunTool]


def test_a_trip_finishes_the_run_naming_the_check_and_runs_nothing() -> None:
    loop = Loop(SPEC)
    loop.start("hi", 0.0)
    loop.send(ModelReplied("model-1", TWO_CALLS, now=1.0))
    [finish] = loop.send(GuardrailChecked("c1/tool_call/safe", True, "not /", now=2.0))
    assert finish == Finish(
        StopReason.guardrail, {"guardrail": "safe", "on": "tool_call", "message": "not /"}
    )
    assert loop.outstanding_ids() == frozenset()
    with pytest.raises(ProtocolError):  # the other checks are no longer waited for
        loop.send(GuardrailChecked("c2/tool_call/safe", False, now=3.0))


def test_the_answer_is_held_until_its_checks_pass() -> None:
    loop = Loop(SPEC)
    loop.start("hi", 0.0)
    loop.send(GuardrailChecked("model-1/input/pii", False, now=1.0))
    answer = ModelResponse([Text("done")], ModelStop.end_turn)
    [check] = loop.send(ModelReplied("model-1", answer, now=2.0))
    assert check == CheckGuardrail(
        "model-1/final/tone", "tone", "final", FinalAnswer("done", "done")
    )
    [finish] = loop.send(GuardrailChecked(check.id, False, now=3.0))
    assert finish == Finish(StopReason.completed, "done")


def test_a_check_no_one_asked_for_is_refused_and_changes_nothing() -> None:
    loop = Loop(SPEC)
    loop.start("hi", 0.0)
    before = loop.dump()
    with pytest.raises(ProtocolError, match="matches no outstanding guardrail check"):
        loop.send(GuardrailChecked("ghost", True, now=1.0))
    assert loop.dump() == before


def test_every_step_dumps_and_a_resume_hands_the_checks_out_again() -> None:
    loop = Loop(SPEC)
    loop.start("hi", 0.0)
    loop.send(ModelReplied("model-1", TWO_CALLS, now=1.0))
    again = Loop.load(SPEC, loop.dump())
    assert again.state == loop.state
    commands = again.send(Resumed(now=2.0))
    assert sorted(kinds(commands)) == [
        "CheckGuardrail c1/tool_call/safe",
        "CheckGuardrail c2/tool_call/safe",
        "CheckGuardrail model-1/input/pii",
    ]
    assert Loop.replay(SPEC, again.state.events).dump() == again.dump()


def test_past_the_deadline_the_held_round_stops_without_running() -> None:
    spec = msgspec.structs.replace(
        SPEC, guards=msgspec.structs.replace(SPEC.guards, deadline_s=5.0)
    )
    loop = Loop(spec)
    loop.start("hi", 0.0)
    loop.send(ModelReplied("model-1", TWO_CALLS, now=1.0))
    [finish] = loop.send(Tick(now=6.0))
    assert finish.reason is StopReason.deadline  # type: ignore[attr-defined]


def test_a_spec_keeps_a_guardrail_function_s_guardrail_and_refuses_two_of_a_name() -> None:
    @guardrail(on="final")
    def tone(answer: FinalAnswer) -> None:
        return None

    assert LoopSpec(guardrails=[tone]).guardrails == (Guardrail("tone", "final"),)
    with pytest.raises(InvalidSpec, match="two guardrails share a name"):
        LoopSpec(guardrails=[tone, Guardrail("tone", "input")])
    assert CallModel  # (the command the input is checked beside)
