"""The command line: transcripts, validation, the diagram; user mistakes exit 2 in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from turnstile.executors import cli
from turnstile.executors._demo import run_demo

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"


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


def test_diagram_prints_mermaid_or_dot(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagram"]) == 0
    assert "stateDiagram-v2" in capsys.readouterr().out
    assert cli.main(["diagram", "--format", "dot"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "turnstile loop"') and "awaiting_model -> finalizing" in out


def test_dot_without_graphviz_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz -> ImportError
    assert cli.main(["diagram", "--format", "dot"]) == 2
    assert "pip install graphviz" in capsys.readouterr().err


def test_validate_a_trace_replays_it_and_checks_every_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["validate", str(FIXTURES / "anthropic" / "weather.json")]) == 0
    assert "valid" in capsys.readouterr().out


def test_validate_a_trace_that_no_longer_replays_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = json.loads((FIXTURES / "anthropic" / "weather.json").read_text())
    trace["loop"]["prompt"] = "something else"
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(trace, ensure_ascii=False))
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"turnstile: {path}: cannot replay") and "something else" in err


def test_a_usage_mistake_is_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["run", "--provider", "gemini", "hi"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'gemini'" in err


@pytest.mark.parametrize("command", [["diagram"], ["demo"]])
def test_output_into_a_closed_pipe_ends_quietly(command: list[str]) -> None:
    """`turnstile diagram | head`: the reader may be gone before the output is written."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "turnstile.executors.cli", *command],
            stdout=writer,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(writer)
    assert done.stderr == b""
    assert done.returncode == 1


def test_replay_says_why_the_run_ended_early(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = json.loads((FIXTURES / "anthropic" / "weather.json").read_text())
    trace["exchanges"][0]["response"] = {
        "status": 401,
        "headers": {"content-type": "application/json"},
        "body": {"type": "error", "error": {"type": "authentication_error", "message": "no key"}},
    }
    path = tmp_path / "refused.json"
    path.write_text(json.dumps(trace, ensure_ascii=False))
    assert cli.main(["replay", str(path)]) == 1
    err = capsys.readouterr().err
    assert "after 1 of 2 exchanges, because model-1 failed: authentication_error: no key" in err
    assert "user: 北京和上海哪个更暖和?" in err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            lambda text: text.replace('"exchanges": [', '"exchanges": [,', 1),
            r"not JSON: Expecting value \(line \d+, column \d+\)",
            id="a JSON syntax error",
        ),
        pytest.param(
            lambda text: text.replace('"exchanges"', '"exchange"', 1),
            "not a valid trace: Object contains unknown field `exchange`",
            id="a misspelt field",
        ),
        pytest.param(
            lambda text: '{"hello": "world"}',
            "neither a trace .* nor a state dump",
            id="neither",
        ),
    ],
)
def test_validate_says_what_is_wrong_with_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, message: str
) -> None:
    path = tmp_path / "trace.json"
    text = (FIXTURES / "anthropic" / "weather.json").read_text(encoding="utf-8")
    path.write_text(edit(text), encoding="utf-8")
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "state dump:" not in err and err.count("\n") == 1
