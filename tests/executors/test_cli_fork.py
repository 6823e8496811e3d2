"""`turnstile fork JOURNAL --at POINT [a change] -o BRANCH`, then `turnstile run --journal BRANCH`,
offline (the agents of `cli_agents.py` answer from a script)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from turnstile.core import ModelReplied, ToolReturned
from turnstile.executors import Journal
from turnstile.executors.cli import main

AGENT = "tests.executors.cli_agents:agent"


@pytest.fixture
def parent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "run.journal"
    assert main(["run", AGENT, "Weather in Paris?", "--journal", str(path)]) == 0
    capsys.readouterr()
    return path


def test_fork_with_a_changed_result_then_run_continues_it_from_there(
    parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    branch = tmp_path / "branch.journal"
    snow = 'c1={"city": "Paris", "sky": "snow"}'
    assert main(["fork", str(parent), "--at", "call:c1", "--result", snow, "-o", str(branch)]) == 0
    assert "turnstile run AGENT --journal" in capsys.readouterr().out
    assert main(["run", AGENT, "--journal", str(branch)]) == 0
    events = Journal.read(branch)
    results = [e.content for e in events if type(e) is ToolReturned]
    assert results == ['{"city": "Paris", "sky": "snow"}']
    assert len(events) == len(Journal.read(parent))  # the same steps, one result changed
    assert capsys.readouterr().out == "It is sunny in Paris,\nand 21 °C.\n"  # asked again


def test_fork_at_a_turn_with_another_model_asks_it(
    parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    branch = tmp_path / "branch.journal"
    assert main(["fork", str(parent), "--at", "turn:2", "--model", "m2", "-o", str(branch)]) == 0
    with Journal(branch) as journal:
        assert msgspec.json.decode(journal.header)["change"] == {"model": "m2"}  # type: ignore[arg-type]
    assert main(["run", AGENT, "--journal", str(branch)]) == 0
    replies = [e for e in Journal.read(branch) if type(e) is ModelReplied]
    assert [r.model for r in replies] == ["scripted-1", "m2"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--at", "turn:9"], "cannot fork"),
        (["--at", "call:c1", "--result", "c1"], "say CALL=JSON"),
        (["--at", "call:c1", "--result", "c1={"], "not JSON"),
    ],
)
def test_fork_mistakes_are_one_line_and_exit_2(
    parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["fork", str(parent), *argv, "-o", str(tmp_path / "b.journal")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
