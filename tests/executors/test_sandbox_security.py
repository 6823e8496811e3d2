"""Each hostile tool tries one escape; the sandbox contains it and leaves no process behind.

Where the escape would work without the sandbox, a control run in-process shows it, so a test
cannot pass just because the tool is broken. Each runs under every tier (`TIERS`), and is
skipped, naming the reasons, where this host cannot give the tier or none of the tier's layers
that contain its escape is in force.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turnstile.executors import invoke
from turnstile.executors.sandbox import Sandbox, SandboxLimits

from . import hostile_tools as h
from .test_sandbox_tiers import TIER_NAMES, layers_of, needs_any, needs_tier, sandbox_of

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-0123456789abcdef0123456789abcdef"
MARKER = f"turnstile-escapee-{os.getpid()}"


@pytest.fixture(scope="module", params=TIER_NAMES)
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def box(tier: str) -> Iterator[Sandbox]:
    tools = [
        h.add,
        h.write_file,
        h.connects,
        h.fork_bomb,
        h.allocates,
        h.escapes,
        h.signals_parents,
    ]
    with sandbox_of(tier, tools, SandboxLimits(wall_s=10, processes=8), warm=1) as sandbox:
        yield sandbox


_HOST = """
import json, os, sys
sys.path.insert(0, os.getcwd())
from tests.executors import hostile_tools as h
from turnstile.executors import invoke
from turnstile.executors.sandbox import Sandbox
me = os.getpid()
control = invoke(h.steals_secrets, {"host_pid": me})
with Sandbox([h.steals_secrets], tier=sys.argv[1]) as box:
    boxed = box.run("steals_secrets", {"host_pid": me})
print(json.dumps([control.content, boxed.content, boxed.is_error]))
"""


def test_the_host_s_api_key_cannot_be_read_from_env_or_proc(tier: str) -> None:
    needs_tier(tier)
    needs_any(layers_of(tier), "mount_namespace", "separate_uid", "landlock")
    host = subprocess.run(
        [sys.executable, "-c", _HOST, tier],
        env={**os.environ, "ANTHROPIC_API_KEY": KEY},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    control, boxed, is_error = json.loads(host.stdout)
    assert KEY in json.loads(control)["/proc/self/environ"]  # the tool does find it, unboxed
    assert KEY in json.loads(control)["/proc/<host>/environ"]
    assert KEY not in boxed and "sk-test" not in boxed
    if is_error:  # no root of its own: Landlock lets it read no /proc but its own
        assert boxed.startswith("steals_secrets failed: PermissionError") and "'/proc'" in boxed
    else:
        assert {"/proc/<ppid>/environ", "/proc/1/environ"} <= set(json.loads(boxed))
    assert h.leftovers() == []


def test_no_connection_reaches_a_server_on_localhost(box: Sandbox) -> None:
    needs_any(box.layers, "network_namespace", "seccomp", "landlock")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert invoke(h.connects, {"port": port}).content == "connected"  # unboxed, it gets in
        server.accept()[0].close()
        outcome = box.run("connects", {"port": port})
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()
    assert outcome.is_error and outcome.content.endswith("(the sandbox has no network)")
    assert h.leftovers() == []


def test_the_project_dir_cannot_be_written(box: Sandbox) -> None:
    needs_any(box.layers, "landlock", "separate_uid")
    target = ROOT / f"pwned-{uuid.uuid4().hex}"
    outcome = box.run("write_file", {"path": str(target), "size": 5})
    assert outcome.is_error and "PermissionError" in outcome.content
    assert not target.exists()
    assert h.leftovers() == []


def test_world_writable_tmp_cannot_be_written(box: Sandbox) -> None:
    needs_any(box.layers, "landlock")
    target = Path("/tmp") / f"pwned-{uuid.uuid4().hex}"
    outcome = box.run("write_file", {"path": str(target), "size": 5})
    assert outcome.is_error and "PermissionError" in outcome.content
    assert not target.exists()
    assert h.leftovers() == []


def test_a_fork_bomb_stays_within_the_process_limit(box: Sandbox) -> None:
    needs_any(box.layers, "separate_uid")
    outcome = box.run("fork_bomb", {"seconds": 0.5})
    assert outcome.is_error and "left processes running" in outcome.content
    refused = int(outcome.content.rsplit("forks refused: ", 1)[1])
    assert refused > 0  # the limit, not the clock, stopped the forking
    assert h.leftovers() == []


def test_allocating_2_gib_fails_within_the_memory_limit(box: Sandbox) -> None:
    needs_any(box.layers, "rlimits")
    outcome = box.run("allocates", {"gigabytes": 2})
    assert outcome == (
        "allocates failed: MemoryError (the sandbox's memory limit is 512 MiB)",
        True,
    )
    assert h.leftovers() == []


def test_a_setsid_double_fork_does_not_survive_the_call(box: Sandbox) -> None:
    needs_any(box.layers, "pid_namespace", "subreaper")
    outcome = box.run("escapes", {"marker": MARKER})
    assert outcome.is_error and outcome.content.endswith("Its result was: escaped")
    assert h.leftovers(MARKER) == []


def test_signals_to_the_parent_and_the_host_are_refused(box: Sandbox) -> None:
    needs_any(box.layers, "separate_uid", "landlock")
    outcome = box.run("signals_parents", {"host_pid": os.getpid()})
    attempts = json.loads(outcome.content)
    assert len(attempts) == 4 and "sent" not in attempts.values(), attempts
    assert box.run("add", {"a": 1, "b": 1}).content == "2"  # the sandbox is still serving
    assert h.leftovers() == []


@contextlib.contextmanager
def _writing(
    tier: str, tool: Any, tmp_path: Path, wall_s: int = 10
) -> Iterator[tuple[Sandbox, Path]]:
    """A warm sandbox of `tier` running `tool`, and a file in a dir its calls may write."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    limits = SandboxLimits(wall_s=wall_s, writable_paths=(str(shared),))
    with sandbox_of(tier, [tool], limits, warm=1) as box:
        yield box, shared / "log"


def _grows(log: Path) -> bool:
    """Whether something still writes `log` (it grows within 50 ms)."""
    size = log.stat().st_size if log.exists() else 0
    time.sleep(0.05)
    return (log.stat().st_size if log.exists() else 0) != size


def test_a_thread_left_running_writes_nothing_after_the_answer(tier: str, tmp_path: Path) -> None:
    needs_any(layers_of(tier), "pid_namespace", "subreaper")
    with _writing(tier, h.leaves_thread_writing, tmp_path) as (box, log):
        for _ in range(5):
            assert box.run("leaves_thread_writing", {"path": str(log)}) == ("started", False)
            assert log.exists() and not _grows(log)


def test_a_process_left_whose_first_thread_ended_is_found_and_killed(
    tier: str, tmp_path: Path
) -> None:
    """/proc shows such a process as a zombie: it is alive while any thread of it is."""
    needs_any(layers_of(tier), "pid_namespace", "subreaper")
    with _writing(tier, h.leaves_a_headless_process, tmp_path) as (box, log):
        content, is_error = box.run("leaves_a_headless_process", {"path": str(log)})
        assert is_error and "left processes running" in content
        assert log.exists() and not _grows(log)


def test_a_call_that_wakes_itself_after_it_ends_runs_nothing_after_the_answer(
    tier: str, tmp_path: Path
) -> None:
    """A timer of its own sends it SIGCONT, and its exit is made to linger: it is killed, not
    only stopped, before it is answered. (Woken before init saw it stop, it lingers until
    the wall-clock limit, as a call that hangs.)"""
    needs_any(layers_of(tier), "pid_namespace", "subreaper")
    with _writing(tier, h.wakes_itself_to_linger, tmp_path, wall_s=3) as (box, log):
        for _ in range(10):
            content = box.run("wakes_itself_to_linger", {"path": str(log)}).content
            assert content == "armed" or "timed out after 3 s" in content
            assert not _grows(log)
