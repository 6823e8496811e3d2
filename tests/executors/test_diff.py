"""Two runs compared model call by model call: the first step that differs, and why."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import Event, Loop, LoopSpec, Price, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, divergence, fork, sync


def calls(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(list(calls), ModelStop.tool_use, Usage(10, 5))


def text(t: str) -> ModelResponse:
    return ModelResponse([Text(t)], ModelStop.end_turn, Usage(12, 6))


def weather_run(
    temperature: int, *, answer: str = "It is mild.", city: str = "Paris", ids: str = "ab"
) -> list[Event]:
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"{temperature} C in {city}"

    script = [
        calls(ToolCall(f"{ids[0]}1", "weather", {"city": city})),
        calls(ToolCall(f"{ids[1]}1", "weather", {"city": "Rome"})),
        text(answer),
    ]
    spec = LoopSpec(models=("m",), prices={"m": Price(input=1.0, output=2.0)})
    run = sync.run(spec, "Weather?", model=ScriptedModel(script), tools=[weather])
    return run.state.events


def test_two_runs_of_the_same_script_agree_at_every_step() -> None:
    found = divergence(weather_run(20), weather_run(20))
    assert found.first is None and found.why == ""
    assert len(found.a) == len(found.b) == 3
    assert "the runs agree at every step" in found.report()


def test_a_changed_tool_result_is_named_as_the_first_divergence() -> None:
    found = divergence(weather_run(20), weather_run(30))
    assert found.first == 1
    assert found.why == (
        "weather returned something else "
        '(weather({"city": "Paris"}) → 20 C in Paris / weather({"city": "Paris"}) → 30 C in Paris)'
    )
    assert found.report().startswith("first divergence: step 1: weather returned")


def test_other_arguments_come_before_other_results() -> None:
    found = divergence(weather_run(20), weather_run(30, city="Oslo"))
    assert found.first == 1 and found.why.startswith("weather is called with other arguments")


def test_only_the_final_text_differs() -> None:
    found = divergence(weather_run(20), weather_run(20, answer="It is warm."))
    assert found.first == 3
    assert found.why.startswith("the replies' text differs (")


def test_call_ids_and_times_are_not_differences() -> None:
    a = weather_run(20)
    b = [msgspec.structs.replace(e, now=e.now + 100.0) for e in weather_run(20, ids="xy")]
    assert a != b
    assert divergence(a, b).first is None


def test_tokens_and_cost_are_shown_side_by_side() -> None:
    found = divergence(weather_run(20), weather_run(30), prices={"m": Price(input=1.0, output=2.0)})
    assert found.a[0].cost == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)
    report = found.report()
    assert "tokens 10 in / 5 out, cost 0.000020  |  10 in / 5 out, cost 0.000020" in report
    assert report.splitlines()[-1] == (
        "total   3 steps, 32 in / 16 out, cost 0.000064  |  3 steps, 32 in / 16 out, cost 0.000064"
    )


def test_a_run_that_stops_early_diverges_where_the_other_goes_on() -> None:
    longer = weather_run(20)
    shorter = longer[:4]  # its start, the first reply and its call's events
    found = divergence(shorter, longer)
    assert found.first is not None and found.why == "only b goes on"


def test_different_prompts_diverge_at_step_zero() -> None:
    from turnstile.core.messages import UserMessage

    a = weather_run(20)
    b = list(a)
    b[0] = type(a[0])(messages=[UserMessage("Snow?")], now=a[0].now, tools=a[0].tools)
    found = divergence(a, b)
    assert found.first == 0 and found.why.startswith("the prompts differ")


def test_a_fork_with_one_changed_result_diverges_first_at_that_step() -> None:
    parent = weather_run(20)
    loop = Loop.replay(LoopSpec(models=("m",)), parent)
    ran: list[str] = []

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(city)
        return f"20 C in {city}"

    branch = fork(loop, results={"b1": "hail in Rome"})
    script = ScriptedModel([text("Hail in Rome.")])
    run = sync.run(LoopSpec(models=("m",)), loop=branch, model=script, tools=[weather])
    found = divergence(parent, run.state.events)
    assert found.first == 2 and found.why.startswith("weather returned something else")
    assert ran == []  # the calls before the change were served from the parent's log
