"""The command line: transcripts, validation, the diagram; user mistakes exit 2 in one line."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import Loop, LoopSpec, ModelReplied, ToolReturned, ToolSpec
from turnstile.core.conditions import TurnCountIs
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import Journal, cli
from turnstile.executors._demo import demo_spec, run_demo

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
        cli.main(["run", "--provider", "anthropic", "--max-tokens", "many", "hi"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid int value: 'many'" in err


def test_an_unknown_provider_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--provider", "gemini", "hi"]) == 2
    assert capsys.readouterr().err == (
        "turnstile: model: 'gemini' names no provider: a model string starts with anthropic:, "
        "openai:, openai-chat:, openai-responses:, deepseek:, openrouter:, ollama:, vllm:, "
        "lmstudio:\n"
    )


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


# -- journals ----------------------------------------------------------------------------------


def _demo_journal(tmp_path: Path) -> tuple[Path, Path]:
    """The demo run's events in a journal, and its spec as JSON beside it."""
    path, spec = tmp_path / "demo.journal", tmp_path / "spec.json"
    with Journal(path) as journal:
        for event in run_demo().loop.state.events:
            journal.append(event)
    spec.write_bytes(msgspec.json.encode(demo_spec()))
    return path, spec


def test_show_and_validate_a_journal_with_its_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    assert cli.main(["show", str(path), "--spec", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "completed after 2 turns" in out and "get_weather" in out
    assert cli.main(["validate", str(path), "--spec", str(spec)]) == 0
    assert capsys.readouterr().out == f"{path}: valid journal (7 events, 4 messages)\n"


def test_diff_of_a_journal_and_its_changed_copy_names_the_first_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    events = Journal.read(path)
    changed = tmp_path / "changed.journal"
    with Journal(changed) as journal:
        for event in events:
            if type(event) is ToolReturned:
                event = msgspec.structs.replace(event, content="snowing")
            journal.append(event)
    assert cli.main(["diff", str(path), str(path), "--spec", str(spec)]) == 0
    assert capsys.readouterr().out.startswith("the runs agree at every step\n")
    assert cli.main(["diff", str(path), str(changed), "--spec", str(spec)]) == 1
    assert capsys.readouterr().out.startswith(
        "first divergence: step 1: get_weather returned something else"
    )


def test_a_journal_of_a_run_without_tools_needs_no_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = Loop(LoopSpec())
    [ask] = loop.start("hi", 0.0)
    loop.send(ModelReplied(ask.id, ModelResponse([Text("hello")], ModelStop.end_turn), now=1.0))
    path = tmp_path / "run.journal"
    with Journal(path) as journal:
        for event in loop.state.events:
            journal.append(event)
    assert cli.main(["show", str(path)]) == 0
    assert "hello" in capsys.readouterr().out
    assert cli.main(["validate", str(path)]) == 0
    assert "valid journal (2 events, 2 messages)" in capsys.readouterr().out


def test_a_journal_holds_its_tools_so_show_and_validate_need_no_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _demo_journal(tmp_path)
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "completed after 2 turns" in out and "get_weather" in out
    assert cli.main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: valid journal (7 events, 4 messages)\n"


def test_an_old_journal_without_its_tools_that_does_not_replay_says_to_give_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    first, *rest = Journal.read(path)
    path.unlink()
    with Journal(path) as journal:  # as journals were written before `Started` held the tools
        for event in [msgspec.structs.replace(first, tools=()), *rest]:
            journal.append(event)
    assert cli.main(["validate", str(path), "--spec", str(spec)]) == 0
    capsys.readouterr()
    for command in ("show", "validate"):
        assert cli.main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--spec" in err and re.search(r"byte \d+", err), err


def test_a_torn_journal_is_shown_with_a_note_of_what_was_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    whole = path.stat().st_size
    with path.open("ab") as f:
        f.write(b"\x40\x00\x00")  # the start of a record's length: a kill landed there
    for command in ("show", "validate"):
        assert cli.main([command, str(path), "--spec", str(spec)]) == 0
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and f"byte {whole} (3 bytes)" in captured.err
        assert "completed after 2 turns" in captured.out or "valid journal" in captured.out
    assert path.stat().st_size == whole + 3, "reading a journal never writes to it"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:], r"byte 22: damaged record"),
        (lambda data: data[:18] + b"\x09\x00\x00\x00" + data[22:], "byte 18: written by a newer"),
    ],
    ids=["damaged", "newer"],
)
def test_a_journal_that_cannot_be_read_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any, message: str
) -> None:
    path, spec = _demo_journal(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    for command in ("show", "validate"):
        assert cli.main([command, str(path), "--spec", str(spec)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and re.search(message, err), err


BOMB = b'{"a":' * 3000


@pytest.mark.parametrize(
    "content",
    [
        b'{"schema": 2, "state": ' + BOMB,
        b'{"schema": 2, "state": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        b'{"format": "turnstile-trace/1", "provider": "anthropic", "loop": ' + BOMB,
        b'{"provider": "anthropic", "loop": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        b"[" * 3000 + b"]" * 3000,
        b"[" + b"1," * 5_000_000 + b"1]",
    ],
)
@pytest.mark.parametrize("command", ["show", "validate"])
def test_a_file_nested_thousands_deep_or_ten_megabytes_of_no_run_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, content: bytes
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert cli.main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_journal_or_spec_nested_thousands_deep_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    spec.write_bytes(b'{"tools": [{"name": "f", "parameters": ' + BOMB)
    assert cli.main(["show", str(path), "--spec", str(spec)]) == 2
    assert f"{spec}: not a LoopSpec" in capsys.readouterr().err
    payload = b'{"type":"tick","now":9.0,"extra":' + BOMB
    length = struct.pack("<I", len(payload))
    frame = length + struct.pack("<II", zlib.crc32(length), zlib.crc32(payload))
    with path.open("ab") as f:
        f.write(frame + payload + frame + payload)
    for command in ("show", "validate"):
        assert cli.main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not an event" in err


def test_a_spec_that_is_no_loop_spec_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, spec = _demo_journal(tmp_path)
    spec.write_text('{"tools": 3}')
    assert cli.main(["show", str(path), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{spec}: not a LoopSpec" in err


def test_a_spec_keeps_its_stop_conditions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run stopped after its first turn by a condition of its spec: without the condition
    the replay would wait for a model call the journal never answers."""
    spec = LoopSpec(tools=(ToolSpec("lookup"),), stop_when=(TurnCountIs(1),))
    loop = Loop(spec)
    [ask] = loop.start("hi", 0.0)
    reply = ModelResponse([ToolCall("c1", "lookup", {})], ModelStop.tool_use)
    [run] = loop.send(ModelReplied(ask.id, reply, now=1.0))
    loop.send(ToolReturned(run.id, "ok", now=2.0))
    path, spec_file = tmp_path / "run.journal", tmp_path / "spec.json"
    with Journal(path) as journal:
        for event in loop.state.events:
            journal.append(event)
    spec_file.write_bytes(msgspec.json.encode(spec))
    assert cli.main(["show", str(path), "--spec", str(spec_file)]) == 0
    assert "stop_condition" in capsys.readouterr().out


def test_a_spec_can_be_named_where_it_lives_in_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _demo_journal(tmp_path)
    assert cli.main(["validate", str(path), "--spec", "turnstile.executors._demo:SPEC"]) == 2
    assert "cannot import the spec" in capsys.readouterr().err
    assert cli.main(["validate", str(path), "--spec", "turnstile.executors._demo:demo_spec"]) == 2
    assert "not a LoopSpec but an object of type function" in capsys.readouterr().err
    assert cli.main(["validate", str(path), "--spec", "tests.executors.test_cli:DEMO_SPEC"]) == 0
    assert "valid journal" in capsys.readouterr().out


DEMO_SPEC = demo_spec()
