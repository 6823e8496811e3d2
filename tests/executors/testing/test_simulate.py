"""`simulate`: planted bugs found, shrunk, kept as regression files that fail until fixed."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from turnstile.executors.testing import Faults, Violation, simulate

from .planted import BUGS, source

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parents[3] / "fixtures"


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_planted_bug_is_found_shrunk_and_kept_as_a_test_that_fails_until_fixed(
    bug: str, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(agent=source(bug, fixed=False))
    pytester.syspathinsert()
    sys.modules.pop("agent", None)
    simulation = importlib.import_module("agent").simulation
    report = simulate(**simulation, seeds=200, target="agent:simulation")
    [found] = report.violations
    assert found.invariant == BUGS[bug][3]
    assert report.runs[-1].seed < 200
    assert len(found.faults) <= 2
    found.save(pytester.path / f"test_{bug}.simulation.json")
    assert Violation.load(pytester.path / f"test_{bug}.simulation.json") == found

    sys.modules.pop("agent", None)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(failed=1)
    pytester.makepyfile(agent=source(bug, fixed=True))
    sys.modules.pop("agent", None)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_recorded_trace_is_the_model_its_spec_prompt_and_tool_outputs_too() -> None:
    from turnstile.core import StopReason

    report = simulate(None, model=FIXTURES / "anthropic/weather.json", seeds=30, keep_going=True)
    assert report.ok, str(report)
    calm = simulate(None, model=FIXTURES / "anthropic/weather.json", seeds=3, faults=Faults.none())
    assert {r.stop_reason for r in calm.runs} == {StopReason.completed}


def test_a_model_client_is_asked_once_per_turn_for_every_seed() -> None:
    from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather

    class Client:
        def __init__(self) -> None:
            self.scripted = demo_model()

        def complete(self, request: object) -> object:
            return self.scripted.complete(request)  # type: ignore[arg-type]

    client = Client()
    report = simulate(demo_spec(), PROMPT, model=client, tools=[get_weather], seeds=20)
    assert report.ok and len(client.scripted.requests) == 2


def test_a_violation_of_a_traced_run_replays_from_its_trace() -> None:
    from turnstile.core import LoopState, StopReason
    from turnstile.executors.testing import SimulationFailed, replayed

    def one_turn(state: LoopState) -> bool:
        return state.turns < 2

    trace = FIXTURES / "anthropic/weather.json"
    [found] = simulate(None, model=trace, seeds=5, invariants=[one_turn]).violations
    with pytest.raises(SimulationFailed, match="one_turn broke"):
        replayed(found, None, model=trace, invariants=[one_turn])
    assert replayed(found, None, model=trace).stop_reason is StopReason.completed


def test_a_regression_file_without_a_target_fails_saying_so(pytester: pytest.Pytester) -> None:
    from turnstile.core import LoopState

    def never(state: LoopState) -> bool:
        return False

    trace = FIXTURES / "anthropic/weather.json"
    [found] = simulate(None, model=trace, seeds=1, invariants=[never]).violations
    found.save(pytester.path / "test_untargeted.simulation.json")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*names no target (module:name): it cannot be replayed*"])


def test_a_model_string_is_a_live_model_called_only_when_told_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import turnstile.providers
    from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather

    with pytest.raises(TypeError, match="live=True"):
        simulate(demo_spec(), PROMPT, model="openai:gpt-4.1", tools=[get_weather], seeds=1)
    built: list[str] = []

    def offline(model: str) -> object:  # what model_client would build, without the network
        built.append(model)
        return demo_model()

    monkeypatch.setattr(turnstile.providers, "model_client", offline)
    report = simulate(
        demo_spec(), PROMPT, model="openai:gpt-4.1", tools=[get_weather], seeds=3, live=True
    )
    assert report.ok and built == ["openai:gpt-4.1"]
