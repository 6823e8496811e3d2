"""The command line: transcripts, validation, the diagram; user mistakes exit 2 in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from turnstile.executors import cli
from turnstile.executors._demo import run_demo


def test_show_and_validate_a_dumped_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    state.write_bytes(run_demo().loop.dump())
    assert cli.main(["show", str(state)]) == 0
    assert "completed after 2 turns" in capsys.readouterr().out
    assert cli.main(["validate", str(state)]) == 0
    assert "valid (4 messages)" in capsys.readouterr().out


def test_validate_names_every_violation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "bad.json"
    state.write_text(
        '{"schema": 1, "state": {"phase": "awaiting_model", "messages": ['
        '{"type": "user", "content": "q"}, {"type": "user", "content": "again"}]}}'
    )
    assert cli.main(["validate", str(state)]) == 2  # an invalid state is not loadable at all
    assert "two user messages in a row" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), (b"{not json", "not a turnstile state dump")],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    path = tmp_path / "state.json"
    if content is not None:
        path.write_bytes(content)
    assert cli.main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_diagram_prints_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram"]) == 0
    assert "stateDiagram-v2" in capsys.readouterr().out
