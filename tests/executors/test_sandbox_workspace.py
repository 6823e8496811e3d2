"""A sandbox's workspace: a run's calls share a work dir that lasts the run, snapshotted after
each call so that forks and resumed runs find the files as their history left them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from turnstile.core import LoopSpec, ToolContext
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, aio, fork, sync
from turnstile.executors.sandbox import Sandbox, SandboxLimits, Workspace, available_tiers

from . import workspace_tools as w

TOOLS = [w.put, w.read, w.fill, w.plant, w.nest, w.hide, w.special, w.owners]


def calls(*rounds: list[tuple[str, str, dict[str, Any]]]) -> ScriptedModel:
    """A model that makes each round's calls in turn, then says "done"."""
    replies = [
        ModelResponse([ToolCall(i, n, a) for i, n, a in calls], ModelStop.tool_use, Usage(1, 1))
        for calls in rounds
    ]
    return ScriptedModel([*replies, ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1))])


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(TOOLS, warm=1, workspace=Workspace(tmp_path / "store")) as sandbox:
        yield sandbox


def results(run: Any) -> list[str]:
    return [r.content for m in run.messages if hasattr(m, "results") for r in m.results]


def test_files_persist_across_a_runs_calls(box: Sandbox) -> None:
    model = calls([("c1", "put", {"name": "a", "text": "1"})], [("c2", "read", {"name": "a"})])
    run = sync.run(LoopSpec(), "go", model=model, tools=box)
    assert results(run) == ["ok", "1"]
    assert box.workspace is not None
    assert (box.workspace.files(run.loop.state.events) / "a").read_text() == "1"


def test_another_run_starts_from_an_empty_workspace(box: Sandbox) -> None:
    sync.run(LoopSpec(), "one", model=calls([("c1", "put", {"name": "a", "text": "1"})]), tools=box)
    other = sync.run(LoopSpec(), "two", model=calls([("c1", "read", {"name": "a"})]), tools=box)
    assert results(other) == ["missing"]


def test_a_fork_finds_the_files_as_they_were_at_its_point_and_the_parent_keeps_its_own(
    box: Sandbox,
) -> None:
    model = calls(
        [("c1", "put", {"name": "a", "text": "1"})],
        [("c2", "put", {"name": "a", "text": "2"})],
    )
    parent = sync.run(LoopSpec(), "go", model=model, tools=box)
    forked = fork(parent.loop, at="turn:2", system="read it back instead")
    model = calls([("c9", "read", {"name": "a"})])
    child = sync.run(LoopSpec(), loop=forked, model=model, tools=box)
    assert results(child)[-1] == "1"
    assert box.workspace is not None
    assert (box.workspace.files(parent.loop.state.events) / "a").read_text() == "2"
    assert (box.workspace.files(child.loop.state.events) / "a").read_text() == "1"


def test_a_call_whose_result_was_never_recorded_does_not_count_on_resume(
    tmp_path: Path, box: Sandbox
) -> None:
    model = calls([("c1", "put", {"name": "a", "text": "1"})], [("c2", "read", {"name": "a"})])
    run = sync.run(LoopSpec(), "go", model=model, tools=box)
    events = run.loop.state.events[:4]  # started, replied, c1 started, c1 returned
    round_two = [*events, run.loop.state.events[4]]  # the reply asking for c2
    box.run("put", {"name": "a", "text": "crashed"}, context=ToolContext("c2"), history=round_two)
    # the process dies before c2's result is journaled; another resumes the run from its journal
    again = Workspace(tmp_path / "store")
    assert (again.files(round_two) / "a").read_text() == "1"


def test_a_call_past_the_workspaces_limit_fails_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    limits = SandboxLimits(disk_bytes=256 * 1024)
    with Sandbox(TOOLS, limits, workspace=Workspace(tmp_path / "store")) as box:
        model = calls(
            [("c1", "put", {"name": "a", "text": "1"})],
            [("c2", "fill", {"files": 3, "size": 100 * 1024})],
            [("c3", "fill", {"files": 100, "size": 10})],
            [("c4", "read", {"name": "fill-0"})],
        )
        run = sync.run(LoopSpec(), "go", model=model, tools=box)
    said = results(run)
    assert said[0] == "ok" and said[3] == "missing"
    assert "256 KiB (SandboxLimits.disk_bytes)" in said[1] and "as it was before" in said[1]
    assert "limit of 64 files" in said[2]
    files = box.workspace.files(run.loop.state.events)  # type: ignore[union-attr]
    assert sorted(os.listdir(files)) == ["a"]


def test_symlinks_planted_in_the_workspace_are_kept_as_links_never_followed(
    tmp_path: Path, box: Sandbox
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    secret.chmod(0o600)
    model = calls(
        [
            ("c1", "plant", {"name": "s", "target": str(secret)}),
            ("c2", "plant", {"name": "root", "target": "/"}),
        ],
        [("c3", "read", {"name": "s"})],
    )
    parent = sync.run(LoopSpec(), "go", model=model, tools=box)
    assert results(parent)[2] == "missing"  # the call's root holds no such file
    forked = fork(parent.loop, at="turn:2", system="again")
    model = calls([("c9", "read", {"name": "s"})])
    child = sync.run(LoopSpec(), loop=forked, model=model, tools=box)
    assert results(child)[-1] == "missing"  # restored as the link it was, not the host's file
    store = tmp_path / "store"
    files = box.workspace.files(child.loop.state.events)  # type: ignore[union-attr]
    assert os.readlink(files / "s") == str(secret) and os.readlink(files / "root") == "/"
    kept = [p.read_bytes() for p in (store / "objects").iterdir()]
    assert all(b"host secret" not in data for data in kept)


def test_a_workspace_call_without_its_runs_history_is_an_error(box: Sandbox) -> None:
    outcome = box.run("read", {"name": "a"}, context=ToolContext("c1"))
    assert outcome.is_error and "history" in str(outcome.content)


def test_calls_of_a_round_run_together_share_the_workspace(box: Sandbox) -> None:
    model = calls(
        [
            ("c1", "put", {"name": "a", "text": "1"}),
            ("c2", "put", {"name": "b", "text": "2"}),
            ("c3", "put", {"name": "c", "text": "3"}),
        ],
        [
            ("c4", "read", {"name": "a"}),
            ("c5", "read", {"name": "b"}),
            ("c6", "read", {"name": "c"}),
        ],
    )
    run = trio.run(partial(aio.run, LoopSpec(), "go", model=model, tools=box))
    assert results(run) == ["ok", "ok", "ok", "1", "2", "3"]


def test_a_file_unchanged_since_the_last_snapshot_is_not_stored_again(
    tmp_path: Path, box: Sandbox
) -> None:
    model = calls(
        [("c1", "put", {"name": "a", "text": "same"})],
        [("c2", "put", {"name": "b", "text": "same"})],
        [("c3", "put", {"name": "a", "text": "other"})],
    )
    sync.run(LoopSpec(), "go", model=model, tools=box)
    stored = sorted(p.read_bytes() for p in (tmp_path / "store" / "objects").iterdir())
    assert stored == [b"other", b"same"]


_DIES_AFTER_C2 = """
import os, signal, sys
from turnstile.core import LoopSpec
from turnstile.executors import sync
from turnstile.executors.sandbox import Sandbox, Workspace
from tests.executors.test_sandbox_workspace import TOOLS, calls

class DiesAfterC2(Sandbox):
    def run(self, name, arguments, *, context=None, history=None):
        outcome = super().run(name, arguments, context=context, history=history)
        if context.call_id == "c2":  # snapshot written, result not yet journaled
            os.kill(os.getpid(), signal.SIGKILL)
        return outcome

model = calls([("c1", "put", {"name": "a", "text": "1"})],
              [("c2", "put", {"name": "a", "text": "2"})])
with DiesAfterC2(TOOLS, workspace=Workspace(sys.argv[1])) as box:
    sync.run(LoopSpec(), "go", model=model, tools=box, journal=sys.argv[2])
"""


def test_a_run_resumed_after_kill_9_finds_its_files_as_of_its_last_recorded_result(
    tmp_path: Path,
) -> None:
    store, journal = tmp_path / "store", tmp_path / "run.journal"
    root = Path(__file__).parent.parent.parent
    died = subprocess.run(
        [sys.executable, "-c", _DIES_AFTER_C2, str(store), str(journal)], cwd=root, timeout=120
    )
    assert died.returncode == -signal.SIGKILL
    with Sandbox(TOOLS, workspace=Workspace(store)) as box:
        model = calls([("c3", "read", {"name": "a"})])
        run = sync.run(LoopSpec(), model=model, tools=box, journal=journal)
    said = results(run)
    assert said[0] == "ok" and "interrupted" in said[1] and said[2] == "1"


def test_a_tree_deeper_than_the_limit_fails_the_call_and_is_put_back(box: Sandbox) -> None:
    model = calls(
        [("c1", "put", {"name": "a", "text": "1"})],
        [("c2", "nest", {"depth": 80})],
        [("c3", "read", {"name": "a"})],
    )
    run = sync.run(LoopSpec(), "go", model=model, tools=box)
    said = results(run)
    assert "limit of 64 levels of directories" in said[1] and said[2] == "1"
    assert sorted(os.listdir(box.workspace.files(run.loop.state.events))) == ["a"]  # type: ignore[union-attr]


def test_files_a_call_took_every_right_on_are_kept_and_readable_by_the_next(box: Sandbox) -> None:
    model = calls(
        [("c1", "put", {"name": "a", "text": "1"})],
        [("c2", "hide", {"name": "a"})],
        [("c3", "read", {"name": "a"}), ("c4", "read", {"name": "hidden/a"})],
    )
    assert results(sync.run(LoopSpec(), "go", model=model, tools=box))[2:] == ["1", "1"]


def test_fifos_and_sockets_are_not_kept_and_never_opened(box: Sandbox) -> None:
    model = calls(
        [("c1", "special", {"name": "pipe"}), ("c2", "put", {"name": "a", "text": "1"})],
        [("c3", "read", {"name": "pipe"})],
    )
    run = sync.run(LoopSpec(), "go", model=model, tools=box)
    assert results(run) == ["made", "ok", "missing"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per call needs root")
def test_each_call_owns_the_tree_and_the_host_gets_it_back_after(box: Sandbox) -> None:
    model = calls(
        [("c1", "put", {"name": "a", "text": "1"})],
        [("c2", "owners", {})],
    )
    run = sync.run(LoopSpec(), "go", model=model, tools=box)
    found = msgspec.json.decode(results(run)[1])
    assert found[:-1] == [found[-1]] and found[-1] != 0  # all the call's own, while it runs
    tree = box.workspace.files(run.loop.state.events)  # type: ignore[union-attr]
    assert {p.lstat().st_uid for p in [tree, *tree.rglob("*")]} == {0}


@pytest.mark.parametrize("tier", ["full", "unprivileged", "landlock"])
def test_files_persist_under_every_tier(tier: str, tmp_path: Path) -> None:
    if not available_tiers()[tier].available:
        pytest.skip(f"{tier}: {available_tiers()[tier].missing}")
    model = calls([("c1", "put", {"name": "a", "text": "1"})], [("c2", "read", {"name": "a"})])
    with Sandbox(TOOLS, tier=tier, workspace=Workspace(tmp_path / "store")) as box:
        assert results(sync.run(LoopSpec(), "go", model=model, tools=box)) == ["ok", "1"]


def test_a_call_past_the_snapshots_limit_fails_and_leaves_the_workspace_as_it_was(
    tmp_path: Path,
) -> None:
    store = Workspace(tmp_path / "store", snapshot_bytes=250 * 1024)
    with Sandbox(TOOLS, workspace=store) as box:
        model = calls(
            [("c1", "fill", {"files": 1, "size": 100 * 1024})],
            [("c2", "put", {"name": "fill-0", "text": "x"})],  # another 1 byte: room for it
            [("c3", "put", {"name": "fill-0", "text": "y" * 200 * 1024})],  # no room for it
            [("c4", "read", {"name": "fill-0"})],
        )
        said = results(sync.run(LoopSpec(), "go", model=model, tools=box))
    assert said[:2] == ["filled", "ok"] and said[3] == "x"
    assert "snapshots' limit of 250 KiB" in said[2] and "as it was before" in said[2]
