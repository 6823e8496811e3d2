"""`turnstile simulate module:agent --seeds N`: the report, the exit code, the regression file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from turnstile.executors.cli import main
from turnstile.executors.testing import Violation

from .planted import source


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("bank", "weather_sim"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_a_violation_exits_1_and_is_kept_as_a_regression_file(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "bank.py").write_text(source("replay_safe", fixed=False))
    assert main(["simulate", "bank:simulation", "--seeds", "200"]) == 1
    out = capsys.readouterr().out
    assert "invariant no_double_charge broke at step" in out and "kept as" in out
    [kept] = folder.glob("*.simulation.json")
    assert Violation.load(kept).target == "bank:simulation"


def test_an_agent_that_keeps_its_promises_exits_0(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "weather_sim.py").write_text(
        "from turnstile.executors import Agent\n"
        "from turnstile.executors._demo import demo_model, demo_spec, get_weather\n"
        "agent = Agent(demo_spec(), model=demo_model(), tools=[get_weather])\n"
    )
    assert main(["simulate", "weather_sim:agent", "北京和上海哪个更暖和?", "--seeds", "50"]) == 0
    assert capsys.readouterr().out.startswith("50 seeds, 0 broke an invariant")
    assert main(["simulate", "weather_sim:agent", "--seeds", "5"]) == 2
    assert "needs a prompt" in capsys.readouterr().err
    assert main(["simulate", "weather_sim:nothing"]) == 2


def test_only_some_kinds_of_fault_strike(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / "bank.py").write_text(source("replay_safe", fixed=True))
    assert main(["simulate", "bank:simulation", "--seeds", "40", "--only", "crash"]) == 0
    assert "faults struck: crash " in capsys.readouterr().out
    assert main(["simulate", "bank:simulation", "--only", "crash,meteor"]) == 2
    assert "'meteor' is not a valid FaultKind" in capsys.readouterr().err
