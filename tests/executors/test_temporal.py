"""The Temporal executor: a worker killed with -9 mid-run (in a tool call, in a model call)
loses no call and runs none twice that is not replay-safe; histories replay, and a changed
decision is a `NondeterminismError`; many runs share a worker; approvals are updates; a long
run continues as new with the same event log."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.workflow import NondeterminismError
from turnstile.core import Loop, ToolResults
from turnstile.core._round import INTERRUPTED
from turnstile.executors import Run
from turnstile.executors.testing import assert_history_valid

from tests.executors import temporal_agent as agent
from tests.executors.temporal_kit import HISTORIES, Env, env, keep, temporal
from tests.executors.temporal_kit import replay as replay_history

__all__ = ["env"]

ROOT = Path(__file__).parent.parent.parent
FAST = temporal.Options(heartbeat_s=1.0, retry_interval_s=0.2)
"""A lost worker is noticed within a second, and its calls retried 0.2 s later."""


def results(run: Run) -> dict[str, tuple[object, bool]]:
    return {
        r.call_id: (r.content, r.is_error)
        for m in run.messages
        if type(m) is ToolResults
        for r in m.results
    }


class Workers:
    """Worker processes serving one queue, each killed (or stopped) by its own pid."""

    def __init__(self, env: Env, log: Path) -> None:
        self.env = env
        self.log = log
        self.queue = f"kill-{uuid.uuid4().hex[:12]}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "tests.executors.temporal_agent", self.env.address]
        proc = subprocess.Popen([*argv, self.queue, str(self.log)], cwd=ROOT)
        self.procs.append(proc)
        return proc

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, seen: Callable[[list[str]], bool], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not seen(self.lines()):
            if time.monotonic() > end:
                raise TimeoutError(f"never came: the log holds {self.lines()}")
            time.sleep(0.02)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture
def workers(env: Env, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(env, tmp_path / "calls.log")
    try:
        yield pool
    finally:
        pool.stop()


def killed_run(workers: Workers, kill_when: Callable[[list[str]], bool]) -> tuple[Run, Any]:
    """Start the agent's run on one worker, kill -9 it once the log says `kill_when`, let a
    second worker finish; the run and its history."""
    env = workers.env
    first = workers.spawn()
    handle = env.wait(
        temporal.start(
            env.client,
            agent.SPEC,
            agent.PROMPT,
            model="scripted",
            id=workers.queue,
            task_queue=workers.queue,
            options=FAST,
        ),
        30,
    )
    workers.wait_for(kill_when)
    first.kill()
    first.wait(10)
    workers.spawn()
    run = env.wait(handle.result(), 90)
    return run, env.wait(handle.workflow.fetch_history(), 30)


def check_nothing_lost_or_doubled(run: Run, lines: list[str]) -> None:
    assert run.stop_reason.value == "completed", run
    assert_history_valid(run)
    assert run.trajectory() == ["pay"] * 6 + ["balance"]
    starts = Counter(line.split()[1] for line in lines if line.startswith("start "))
    assert all(n == 1 for n in starts.values()), starts  # no payment made twice
    got = results(run)
    for call_id in agent.PAYMENTS:
        if got[call_id] != (INTERRUPTED, True):
            assert got[call_id] == (f"paid {call_id[4:]}", False)
            assert f"paid {call_id}" in lines and starts[call_id] == 1


def test_kill_9_during_a_tool_call(workers: Workers) -> None:
    run, history = killed_run(workers, lambda lines: "start pay-3" in lines)
    lines = workers.lines()
    check_nothing_lost_or_doubled(run, lines)
    assert results(run)["pay-3"] == (INTERRUPTED, True)  # killed inside it: never made again
    assert "paid pay-3" not in lines
    replay_history(history)
    keep(history, "kill-during-a-tool-call")


def test_kill_9_during_a_model_call(workers: Workers) -> None:
    run, history = killed_run(workers, lambda lines: "model 1" in lines)
    lines = workers.lines()
    check_nothing_lost_or_doubled(run, lines)
    assert lines.count("model 1") == 2  # asked again by the second worker
    assert INTERRUPTED not in [content for content, _ in results(run).values()]
    replay_history(history)
    keep(history, "kill-during-a-model-call")


def kept() -> list[Any]:
    paths = sorted(HISTORIES.glob("*.json"))
    return [WorkflowHistory.from_json(path.stem, path.read_text()) for path in paths]


def test_kept_histories_replay_without_a_nondeterminism_error() -> None:
    histories = kept()
    assert len(histories) >= 10
    replay_history(*histories)


def test_a_changed_decision_is_a_nondeterminism_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that decided otherwise (here: a round's calls handed out in the other order) must
    not take over runs recorded with this one."""
    [history] = [h for h in kept() if h.workflow_id == "anthropic-weather"]
    send = Loop.send
    monkeypatch.setattr(Loop, "send", lambda loop, obs: send(loop, obs)[::-1])
    with pytest.raises(NondeterminismError, match="Activity id of scheduled event"):
        replay_history(history)
