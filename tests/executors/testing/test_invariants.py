"""The checks made after every step and at the end: the user's own and the expected outcome
break with their names; the built-in ones hold under every fault the demo meets."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import Guards, Loop, LoopState, Price, StopReason
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Run, ScriptedModel, sync
from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather
from turnstile.executors.testing import Faults, SimulationFailed, simulate
from turnstile.executors.testing._invariants import _replies_past_budget


def _demo(**options: object):  # type: ignore[no-untyped-def]
    return simulate(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather], **options)


def test_the_built_in_invariants_hold_under_every_kind_of_fault() -> None:
    report = _demo(seeds=100, keep_going=True)
    assert report.ok, str(report)
    assert len({f.kind for r in report.runs for f in r.faults}) >= 6


def test_a_user_invariant_breaks_with_its_name_step_and_seed() -> None:
    def at_most_one_turn(state: LoopState) -> bool:
        """The agent answers in one turn."""
        return state.turns <= 1

    report = _demo(seeds=3, faults=Faults.none(), invariants=[at_most_one_turn])
    [v] = report.violations
    assert (v.invariant, v.seed, v.faults) == ("at_most_one_turn", 0, ())
    assert v.message == "The agent answers in one turn." and v.step > 0
    assert "get_weather" in v.transcript
    with pytest.raises(SimulationFailed, match="at_most_one_turn broke at step"):
        report.raise_for_violation()


def test_an_unexpected_stop_reason_breaks_the_expected_outcome() -> None:
    report = _demo(seeds=3, faults=Faults.none(), expect={StopReason.max_turns})
    assert report.violations[0].invariant == "expected_outcome"
    assert "stopped with completed, expected max_turns" in report.violations[0].message

    def answered(run: Run) -> bool:
        return "上海" in str(run.output)

    assert _demo(seeds=3, faults=Faults.none(), expect=answered).ok


def test_checks_off_is_the_baseline_that_checks_nothing() -> None:
    report = _demo(seeds=3, faults=Faults.none(), checks=False, invariants=[lambda s: False])
    assert report.ok and len(report.runs) == 3


def test_the_cost_budget_allows_one_reply_past_it_the_final_answer() -> None:
    asks = [
        ModelResponse([ToolCall(f"c{i}", "get_weather", {"city": "北京"})], ModelStop.tool_use)
        for i in range(2)
    ]
    script = [*asks, ModelResponse([Text("晴")], ModelStop.end_turn, Usage(10, 5))]
    spec = msgspec.structs.replace(
        demo_spec(), models=("m",), prices={"m": Price(input=1e4, output=1e4)}
    )
    priced = [msgspec.structs.replace(r, usage=Usage(10, 5)) for r in script]
    spent = sync.run(spec, PROMPT, model=ScriptedModel(priced), tools=[get_weather]).state
    assert spent.turns == 3 and spent.cost > 0
    assert _replies_past_budget(Loop(spec, spent)) == 0
    budget = msgspec.structs.replace(spec, guards=Guards(max_cost=spent.cost / 100))
    assert _replies_past_budget(Loop(budget, spent)) == 2  # a run that ignored it: caught
    report = simulate(budget, PROMPT, model=ScriptedModel(priced), tools=[get_weather], seeds=20)
    assert report.ok, str(report)  # the loop itself stops in time, whatever the faults
