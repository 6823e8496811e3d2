"""`turnstile run module:agent PROMPT` and `turnstile show --follow JOURNAL`, offline: the agents
(`cli_agents.py`) answer from a script."""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from turnstile.core import Approved, Loop
from turnstile.executors import Journal, _console, sync, transcript
from turnstile.executors._console import Display, Mirror
from turnstile.executors.cli import main

from . import cli_agents

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.executors.cli_agents:agent"


def test_run_streams_the_text_to_stdout_and_the_rest_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", AGENT, "Weather in Paris?"]) == 0
    out, err = capsys.readouterr()
    assert out == "Let me check.\nIt is sunny in Paris,\nand 21 °C.\n"
    assert err.splitlines() == [
        "[turn 1 · 120 in / 18 out · cost 0.0006 · 0 tool calls]",
        '  → get_weather {"city": "Paris"}',
        '  ← get_weather: {"city":"Paris","temp_c":21,"sky":"sunny"}',
        "[turn 2 · 300 in / 30 out · cost 0.0014 · 1 tool call]",
    ]


def test_run_prints_a_typed_answer_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "tests.executors.cli_agents:typed", "Weather in Paris?"]) == 0
    assert capsys.readouterr().out == '{"city":"Paris","sky":"sunny"}\n'


def test_on_a_terminal_the_status_line_stays_under_the_text() -> None:
    screen = io.StringIO()
    mirror = Mirror(Loop(cli_agents.PRICED))
    display = Display(mirror, priced=True, out=screen, err=io.StringIO(), live=True)
    with display:
        sync.run(cli_agents.agent, "Weather?", on_update=display.update, on_event=display.event)
    shown = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", screen.getvalue())  # no colours, no moves
    lines = [line.strip() for line in shown.splitlines() if line.strip()]
    assert "turn 1 · 120 in / 18 out · cost 0.0006 · 0 tool calls" in lines  # drawn live
    printed = iter(lines)  # the lines printed for good come in order, among the redraws
    for line in [
        "Let me check.",
        '→ get_weather {"city": "Paris"}',
        '← get_weather: {"city":"Paris","temp_c":21,"sky":"sunny"}',
        "It is sunny in Paris,",
        "and 21 °C.",
    ]:
        assert line in printed
    assert lines[-1] == "turn 2 · 300 in / 30 out · cost 0.0014 · 1 tool call"  # kept


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run"], "run needs an agent, as module:attribute (or --provider)"),
        (
            ["run", "tests.executors.cli_agents:not_an_agent", "hi"],
            "tests.executors.cli_agents:not_an_agent: not an Agent but an object of type LoopSpec",
        ),
        (
            ["run", "tests.executors.cli_agents:nowhere", "hi"],
            "cannot import the agent tests.executors.cli_agents:nowhere: module "
            "'tests.executors.cli_agents' has no attribute 'nowhere'",
        ),
        (
            ["run", "--provider", "openai", "two", "prompts"],
            "run --provider takes one argument, the prompt (or an agent, alone)",
        ),
        (["run", AGENT], "run() needs a prompt, or a loop or a journal to resume"),
        (
            ["run", "tests.executors.cli_agents:keyless", "hi"],
            "OPENAI_API_KEY is not set: export it to use the model openai:gpt-4.1",
        ),
    ],
)
def test_run_mistakes_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"turnstile: {message}\n"


def test_show_takes_an_agent_as_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "run.journal"
    assert main(["run", "--journal", str(journal), AGENT, "Weather?"]) == 0
    capsys.readouterr()
    assert main(["show", "--spec", AGENT, str(journal)]) == 0
    assert (
        "── completed after 2 turns · 300 in / 30 out · cost 0.0014 ──" in capsys.readouterr().out
    )


def turnstile(*argv: str, env: dict[str, str]) -> subprocess.Popen[str]:
    code = "import sys; from turnstile.executors.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_ends_the_run_with_130_and_its_journal_resumes_it(tmp_path: Path) -> None:
    journal = str(tmp_path / "run.journal")
    agent = "tests.executors.cli_agents:interruptible"
    env = {"TURNSTILE_TEST_DIR": str(tmp_path)}
    running = turnstile("run", "--journal", journal, agent, "Weather in Paris?", env=env)
    while not (tmp_path / "started").exists():  # the tool is running
        assert running.poll() is None, running.communicate()
        time.sleep(0.02)
    running.send_signal(signal.SIGINT)
    out, err = running.communicate(timeout=60)
    assert running.returncode == 130, err
    assert out == "Let me check.\n"
    assert err.splitlines()[-1] == (
        f"turnstile: cancelled: resume it with turnstile run --journal {journal} {agent}"
    )
    assert "Traceback" not in err
    (tmp_path / "release").touch()
    resumed = turnstile("run", "--journal", journal, agent, env=env)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert out == "It is sunny in Paris,\nand 21 °C.\n"
    assert err.startswith(f"resuming the run in {journal} (")
    loop = Journal.replay(journal, cli_agents.PRICED)
    assert loop.state.phase == "done" and loop.state.turns == 2


def test_show_follow_prints_a_running_journal_as_it_grows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    done = sync.run(cli_agents.agent, "Weather in Paris?")
    path = tmp_path / "run.journal"
    writer = Journal(path)  # the file exists, still empty, when following starts
    wanted, appended = threading.Semaphore(0), threading.Semaphore(0)
    shown: list[str] = []

    def write() -> None:  # another thread writes the run, one event each time it is asked
        for event in done.state.events:
            wanted.acquire()
            writer.append(event)
            appended.release()
        writer.close()

    def wait(seconds: float) -> None:  # while following waits, one more event is written
        shown.append(capsys.readouterr().out)
        wanted.release()
        appended.acquire()

    monkeypatch.setattr(_console, "time", SimpleNamespace(sleep=wait))
    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert main(["show", "--follow", "--spec", AGENT, str(path)]) == 0
    finally:
        thread.join()
    shown.append(capsys.readouterr().out)
    assert len(shown) == len(done.state.events) + 1  # a look at the file per event written
    assert "".join(shown) == transcript(done.state) + "\n"  # what `show` prints at the end
    assert shown[:2] == ["", "user: Weather in Paris?\n"]  # shown once the run started
    assert shown[-1].endswith("\n── completed after 2 turns · 300 in / 30 out · cost 0.0014 ──\n")


def test_show_follow_needs_a_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = tmp_path / "state.json"
    dump.write_bytes(sync.run(cli_agents.agent, "Weather?").loop.dump())
    assert main(["show", "--follow", str(dump)]) == 2
    assert capsys.readouterr().err == (
        f"turnstile: {dump}: not a journal: --follow follows a run's journal\n"
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("typed", "result"),
    [
        ("y\n", '  ← get_weather: {"city":"Paris","temp_c":21,"sky":"sunny"}'),
        ("n\n", "  ✗ get_weather: denied by a human: no reason given. Do not retry it."),
        ("", "  ✗ get_weather: denied by a human: no reason given. Do not retry it."),  # Ctrl-D
        ("ask me later\n", "  ✗ get_weather: denied by a human: ask me later. Do not retry it."),
    ],
)
def test_on_a_terminal_a_call_that_needs_approval_is_asked_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed: str, result: str
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    assert main(["run", "tests.executors.cli_agents:approved", "Weather in Paris?"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(
        'Let me check.\n  ? run get_weather {"city": "Paris"}? [y/N/edit/why not] '
    )
    assert result in err.splitlines()


def test_on_a_terminal_a_call_is_approved_with_arguments_edited_until_they_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    typed = 'edit\n{"town": "Lyon"}\nLyon\n{"city": "Lyon"}\n'
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    journal = str(tmp_path / "run.journal")
    argv = ["run", "--journal", journal, "tests.executors.cli_agents:approved", "Weather?"]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert "    city: a required field is missing\n" in out
    assert "    not JSON: " in out
    edited = [e for e in Journal(journal).events if type(e) is Approved]
    assert [e.arguments for e in edited] == [{"city": "Lyon"}]


def test_on_a_terminal_an_edit_left_empty_denies_the_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal("e\n\n"))
    assert main(["run", "tests.executors.cli_agents:approved", "Weather in Paris?"]) == 0
    denied = "  ✗ get_weather: denied by a human: no reason given. Do not retry it."
    assert denied in capsys.readouterr().err.splitlines()


def test_elsewhere_a_call_that_needs_approval_waits_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = str(tmp_path / "run.journal")
    argv = ["run", "--journal", journal, "tests.executors.cli_agents:approved", "Weather?"]
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "turnstile: get_weather (c1) awaits approval: run it on a terminal to answer, or in code "
        "with approve="
    )
    loop = Journal.replay(journal, cli_agents.PRICED)
    assert loop.state.phase == "awaiting_approval"  # to answer later


def test_elsewhere_a_sub_agent_s_call_that_needs_approval_is_named_with_its_sub_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = str(tmp_path / "run.journal")
    argv = ["run", "--journal", journal, "tests.executors.cli_agents:delegating", "Weather?"]
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "turnstile: get_weather (c1) of sub-agent forecast (call c1) awaits approval: run it on "
        "a terminal to answer, or in code with approve="
    )


def test_the_status_line_is_live_only_on_a_terminal_with_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _console.live_terminal(Terminal()) and not _console.live_terminal(io.StringIO())
    monkeypatch.setitem(sys.modules, "rich", None)  # not installed: plain lines
    assert not _console.live_terminal(Terminal())


def test_version_is_the_installed_distribution_s(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"turnstile {importlib.metadata.version('turnstile')}\n"
