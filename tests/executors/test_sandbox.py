"""The sandbox runs tools like a `Toolbox` does, and turns every misbehaviour into an error
outcome that names the limit, leaving no process behind."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from turnstile.core import LoopSpec, ToolContext, ToolOutcome, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, Toolbox, sync
from turnstile.executors import aio as trio_executor
from turnstile.executors.sandbox import (
    LAYERS,
    Layer,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    available_layers,
)

from . import hostile_tools as h
from .test_sandbox_tiers import TIER_NAMES, sandbox_of

ALL = [
    h.add,
    h.my_call_id,
    h.async_add,
    h.nap,
    h.where_am_i,
    h.write_file,
    h.raises,
    h.exits,
    h.aborts,
    h.segfaults,
    h.hangs,
    h.hangs_briefly,
    h.spins,
    h.floods,
    h.returns_big,
    h.allocates,
    h.leaves_background_sleep,
]


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    # the wall limit leaves room for a second of CPU on a loaded machine: the CPU limit is tested
    with Sandbox(ALL, SandboxLimits(wall_s=15, cpu_s=1), warm=2) as sandbox:
        yield sandbox


def run(box: Sandbox, name: str, **arguments: object) -> tuple[str, bool]:
    outcome = box.run(name, arguments)
    assert h.leftovers() == []
    return outcome.content, outcome.is_error


def test_a_good_tool_returns_its_result(box: Sandbox) -> None:
    assert run(box, "add", a=2, b=3) == ("5", False)
    assert run(box, "async_add", a=2, b=3) == ("5", False)


def test_a_tool_in_the_sandbox_sees_its_call_id(box: Sandbox) -> None:
    outcome = box.run("my_call_id", {}, context=ToolContext("toolu_7"))
    assert (outcome.content, outcome.is_error) == ("toolu_7", False)
    assert h.leftovers() == []


def test_a_cold_sandbox_starts_a_launcher_per_call_and_leaves_none() -> None:
    before = h.launchers()
    sandbox = Sandbox([h.add])
    assert run(sandbox, "add", a=20, b=22) == ("42", False)
    assert run(sandbox, "add", a=1, b=1) == ("2", False)
    deadline = time.monotonic() + 5  # each goes once its call is answered, on its own
    while h.launchers() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.launchers() == before


def test_a_warm_sandbox_keeps_its_launchers_until_closed() -> None:
    before = h.launchers()
    with Sandbox([h.add], warm=2) as sandbox:
        assert run(sandbox, "add", a=1, b=1) == ("2", False)
        started = set(h.launchers()) - set(before)
        assert len(started) == 2
        trees = made_ahead(started)
    assert h.launchers() == before
    assert not any(os.path.exists(f"/proc/{pid}") for pid in trees)


def test_a_tree_made_ahead_and_killed_while_it_waits_is_replaced() -> None:
    before = set(h.launchers())
    with Sandbox([h.add], warm=1) as sandbox:
        assert run(sandbox, "add", a=1, b=1) == ("2", False)
        [launcher] = set(h.launchers()) - before
        for victim in ("tool", "init"):
            made = made_ahead({launcher})
            [init] = children({launcher})
            [tool] = made - {init}
            os.kill(int(tool if victim == "tool" else init), signal.SIGKILL)
            while os.path.exists(f"/proc/{tool}"):  # dead (not a call racing the kill)
                time.sleep(0.01)
            assert run(sandbox, "add", a=1, b=2) == ("3", False)
    assert set(h.launchers()) == before


def children(pids: set[str]) -> set[str]:
    found = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = f.read().rsplit(b")", 1)[1].split()[1].decode()
        except (OSError, IndexError):
            continue
        if ppid in pids:
            found.add(entry)
    return found


def made_ahead(launchers: set[str]) -> set[str]:
    """The init and tool process each launcher keeps made for its next call (waits for them)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inits = children(launchers)
        tools = {pid for pid in children(inits) if h.running_threads(pid)}  # not the last call's
        if len(inits) == len(tools) == len(launchers):
            return inits | tools
        time.sleep(0.05)
    raise AssertionError(f"no tree made ahead by {launchers}")


def test_run_returns_only_once_no_process_of_the_call_can_run_any_more() -> None:
    """A call's process that ended well is stopped when its answer comes (its exit, about a
    millisecond of tearing down memory, comes after), and is gone soon after."""
    before = set(h.launchers())
    with Sandbox([h.add], warm=1) as sandbox:
        assert sandbox.run("add", {"a": 1, "b": 1}).content == "2"  # the launcher is up
        [launcher] = set(h.launchers()) - before
        for n in range(20):  # the call's process used to be still exiting in some of them
            [serving] = made_ahead({launcher}) - children({launcher})
            assert sandbox.run("add", {"a": n, "b": 1}).content == str(n + 1)
            assert h.running_threads(serving) == []
            deadline = time.monotonic() + 5
            while os.path.exists(f"/proc/{serving}") and time.monotonic() < deadline:
                time.sleep(0.001)
            assert not os.path.exists(f"/proc/{serving}")


@pytest.mark.parametrize("tier", TIER_NAMES)
def test_every_tier_s_warm_tree_serves_its_calls_in_turn(tier: str) -> None:
    """Its init stays, each call in a process of its own below it: with a pid namespace as
    pid 1, without one (the landlock tier) as a child subreaper finding what a call left."""
    before = set(h.launchers())
    with sandbox_of(tier, [h.add], warm=1) as box:
        assert box.run("add", {"a": 1, "b": 1}).content == "2"
        [launcher] = set(h.launchers()) - before
        inits, callers = set(), set()
        for n in range(4):
            ready = made_ahead({launcher})
            inits |= children({launcher})
            callers |= ready - inits
            assert box.run("add", {"a": n, "b": 1}).content == str(n + 1)
        assert len(inits) == 1 and len(callers) == 4


@pytest.mark.parametrize("tier", TIER_NAMES)
def test_a_process_left_running_whose_first_thread_ended_is_found_and_killed(
    tier: str, tmp_path: Path
) -> None:
    """/proc shows such a process as a zombie: it is alive while any thread of it is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    written = shared / "log"
    limits = SandboxLimits(writable_paths=(str(shared),))
    with sandbox_of(tier, [h.leaves_a_headless_process], limits, warm=1) as box:
        content, is_error = box.run("leaves_a_headless_process", {"path": str(written)})
        assert is_error and "left processes running" in content
        lines = written.read_text().count("\n")
        time.sleep(0.05)
        assert written.read_text().count("\n") == lines > 0


def test_a_thread_left_running_writes_nothing_after_the_answer(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    written = shared / "log"
    with Sandbox(
        [h.leaves_thread_writing], SandboxLimits(writable_paths=(str(shared),)), warm=1
    ) as box:
        for _ in range(5):
            assert box.run("leaves_thread_writing", {"path": str(written)}) == ("started", False)
            lines = written.read_text().count("\n")
            time.sleep(0.05)
            assert written.read_text().count("\n") == lines > 0
            written.unlink()


def test_a_warm_tree_serves_its_calls_in_turn_each_in_a_fresh_process() -> None:
    """One init per launcher serves the calls that end cleanly, each in a process of its own,
    and no call finds what an earlier one left in its work dir or /dev/shm."""
    before = set(h.launchers())
    with Sandbox([h.where_am_i, h.write_file, "os:listdir"], warm=1) as box:
        assert not box.run("where_am_i", {}).is_error
        [launcher] = set(h.launchers()) - before
        [init] = children({launcher})
        callers = set()
        for _ in range(3):
            for name, arguments in [
                ("write_file", {"path": "/dev/shm/left", "size": 1}),
                ("listdir", {"path": "/dev/shm"}),
                ("where_am_i", {}),
            ]:
                callers |= made_ahead({launcher}) - {init}
                outcome = box.run(name, arguments)
                assert not outcome.is_error
                if name == "listdir":
                    assert outcome.content == "[]"
                if name == "where_am_i":
                    assert msgspec.json.decode(outcome.content)["files"] == ["note.txt"]
        assert children({launcher}) == {init}
        assert len(callers) == 9


def test_a_cold_launcher_loads_only_the_few_core_modules_it_needs() -> None:
    sandbox = Sandbox([h.modules_before_me])
    content, is_error = run(sandbox, "modules_before_me")
    loaded = set(msgspec.json.decode(content))
    assert not is_error
    assert {"turnstile.core._tools", "msgspec"} <= loaded
    unneeded = {"turnstile.core._loop", "turnstile.executors.sandbox._host", "transitions", "trio"}
    unneeded |= {"logging"}  # imported when a tool fails, to log its traceback
    assert not unneeded & loaded


def test_a_warm_launcher_loads_the_whole_core_once_for_its_calls() -> None:
    with Sandbox([h.modules_before_me], warm=1) as sandbox:
        content, is_error = run(sandbox, "modules_before_me")
    loaded = set(msgspec.json.decode(content))
    assert not is_error
    assert {"turnstile.core", "turnstile.core._loop"} <= loaded
    assert "trio" not in loaded


def test_tools_given_by_path_or_as_functions_are_wrapped_like_tool_does() -> None:
    for given in ["tests.executors.hostile_tools:plain_add", h.plain_add]:
        sandbox = Sandbox([given])
        assert sandbox.specs == (tool(h.plain_add).spec,)
        assert run(sandbox, "plain_add", a=1, b=2) == ("3", False)


def test_limits_must_make_sense() -> None:
    with pytest.raises(ValueError, match="memory_bytes must be positive"):
        SandboxLimits(memory_bytes=0)
    with pytest.raises(ValueError, match="open_files must be at least 8"):
        SandboxLimits(open_files=3)


def test_exceptions_and_bad_arguments_read_as_they_do_in_process(box: Sandbox) -> None:
    odd: list[tuple[str, Any]] = [("raises", {}), ("add", {"a": "x", "b": 3}), ("add", [1, 2])]
    for name, arguments in [*odd, ("add", {"a": 1}), ("add", {"a": 1, "b": 2, "c": 3})]:
        assert box.run(name, arguments) == Toolbox(ALL).run(name, arguments)
    assert box.run("ghost", {}) == Toolbox(ALL).run("ghost", {})


def test_exits_and_crashes_are_errors(box: Sandbox) -> None:
    assert run(box, "exits", code=3) == (
        "exits exited with status 3 before returning a result",
        True,
    )
    assert run(box, "exits", code=0)[0].startswith("exits exited with status 0 before")
    assert run(box, "aborts") == ("aborts crashed: killed by SIGABRT", True)
    assert run(box, "segfaults") == ("segfaults crashed: killed by SIGSEGV", True)


def test_a_hang_is_stopped_at_the_wall_clock_limit() -> None:
    with Sandbox([h.hangs, h.add], SandboxLimits(wall_s=1), warm=1) as sandbox:
        content, is_error = run(sandbox, "hangs")
        assert is_error and content == "hangs timed out after 1 s (the sandbox's wall-clock limit)"
        assert run(sandbox, "add", a=1, b=2) == ("3", False)  # the launcher survived the kill


def test_a_tool_s_own_timeout_replaces_the_wall_clock_limit(box: Sandbox) -> None:
    content, is_error = run(box, "hangs_briefly")
    assert (
        is_error
        and content == "hangs_briefly timed out after 0.5 s (the sandbox's wall-clock limit)"
    )


def test_a_cpu_loop_is_stopped_at_the_cpu_limit(box: Sandbox) -> None:
    assert run(box, "spins") == (
        "spins was stopped after 1 s of CPU time (the sandbox's CPU limit)",
        True,
    )


def test_memory_blow_up_names_the_memory_limit(box: Sandbox) -> None:
    assert run(box, "allocates", gigabytes=2) == (
        "allocates failed: MemoryError (the sandbox's memory limit is 512 MiB)",
        True,
    )


def test_output_spam_and_huge_results_hit_the_output_limit(box: Sandbox) -> None:
    content, is_error = run(box, "floods", megabytes=100)
    assert (
        is_error
        and "wrote more than 1 MiB to stdout/stderr (the sandbox's output limit)" in content
    )
    content, is_error = run(box, "returns_big", megabytes=100)
    assert is_error and content == (
        "returns_big returned 95.3674 MiB, more than the sandbox's output limit of 1 MiB"
    )


def test_big_files_hit_the_file_size_limit(box: Sandbox) -> None:
    content, is_error = run(box, "write_file", path="big", size=17 * 1024 * 1024)
    assert is_error and content.startswith("write_file failed: OSError: [Errno 27] File too large")
    assert content.endswith("(the sandbox's file size limit is 16 MiB)")


def test_a_background_process_left_behind_is_killed_and_reported(box: Sandbox) -> None:
    sleeper = f"turnstile-test-sleeper-{os.getpid()}"
    content, is_error = run(box, "leaves_background_sleep", marker=sleeper)
    assert is_error and content.startswith("leaves_background_sleep left processes running")
    assert content.endswith("Its result was: started")
    assert h.leftovers(sleeper) == []


def test_each_call_gets_a_fresh_work_dir_that_is_removed_after(box: Sandbox) -> None:
    first, second = (box.run("where_am_i", {}) for _ in range(2))
    cwd = msgspec.json.decode(first.content)["cwd"]
    assert msgspec.json.decode(first.content)["files"] == ["note.txt"]
    assert msgspec.json.decode(second.content)["cwd"] != cwd and not os.path.exists(cwd)
    env = msgspec.json.decode(first.content)["env"]
    assert sorted(env) == ["HOME", "LANG", "PATH", "TMPDIR"] and env["HOME"] == cwd


def test_writable_paths_can_be_written(tmp_path: object) -> None:
    shared = os.path.join(str(tmp_path), "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    sandbox = Sandbox([h.write_file], SandboxLimits(writable_paths=(shared,)))
    target = os.path.join(shared, "out.bin")
    assert run(sandbox, "write_file", path=target, size=3) == (f"wrote 3 bytes to {target}", False)
    assert os.path.getsize(target) == 3


def test_a_work_dir_below_a_directory_others_may_not_enter_is_shown_to_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(hidden))  # where work dirs are made
    shared = tmp_path / "shared"  # a writable path beside: a call's root holds it, not tmp_path
    shared.mkdir()
    for limits in [SandboxLimits(), SandboxLimits(writable_paths=(str(shared),))]:
        for warm in (0, 1):
            with Sandbox([h.where_am_i], limits, warm=warm) as sandbox:
                content, is_error = run(sandbox, "where_am_i")
            assert not is_error, content
            found = msgspec.json.decode(content)
            assert found["cwd"].startswith(f"{hidden}/") and found["files"] == ["note.txt"]


def test_a_writable_path_above_the_work_dirs_leaves_each_call_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    (shared / "tmp").mkdir(mode=0o755, parents=True)
    shared.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(shared / "tmp"))  # where work dirs are made
    limits = SandboxLimits(writable_paths=(str(shared),))
    for warm in (0, 1):
        with Sandbox([h.where_am_i], limits, warm=warm) as box:
            for _ in range(2):
                content, is_error = run(box, "where_am_i")
                assert not is_error, content
                found = msgspec.json.decode(content)
                assert found["cwd"].startswith(f"{shared}/tmp/") and found["files"] == ["note.txt"]
    assert os.listdir(shared / "tmp") == []  # no call's file was left on the host


def in_threads(sandbox: Sandbox, name: str, arguments: dict[str, object]) -> list[ToolOutcome]:
    outcomes: list[ToolOutcome] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(sandbox.run(name, arguments)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.fixture(scope="module")
def four() -> Iterator[Sandbox]:
    with Sandbox([h.add, h.nap], warm=4) as sandbox:
        assert in_threads(sandbox, "add", {"a": 1, "b": 1}) == [("2", False)] * 4  # all booted
        yield sandbox


def overlapped(outcomes: Iterable[str]) -> bool:
    spans = [msgspec.json.decode(o) for o in outcomes]
    return max(start for start, _ in spans) < min(end for _, end in spans)


def test_four_threads_run_calls_at_once(four: Sandbox) -> None:
    outcomes = in_threads(four, "nap", {"seconds": 0.5})
    assert len(outcomes) == 4 and overlapped(o.content for o in outcomes)
    assert h.leftovers() == []


def test_the_trio_executor_runs_sandboxed_calls_side_by_side(four: Sandbox) -> None:
    naps = [ToolCall(f"n{i}", "nap", {"seconds": 0.5}) for i in range(4)]
    model = ScriptedModel(
        [
            ModelResponse(naps, ModelStop.tool_use, Usage(10, 5)),
            ModelResponse([Text("rested")], ModelStop.end_turn, Usage(10, 5)),
        ]
    )
    run = trio.run(partial(trio_executor.run, LoopSpec(), "rest", model=model, tools=four))
    assert run.output == "rested"
    assert overlapped(r.content for r in run.messages[2].results)
    assert h.leftovers() == []


def test_sync_run_through_the_sandbox_writes_the_same_messages_as_a_toolbox() -> None:
    def script() -> ScriptedModel:
        return ScriptedModel(
            [
                ModelResponse(
                    [
                        Text("adding"),
                        ToolCall("c1", "add", {"a": 2, "b": 3}),
                        ToolCall("c2", "add", {"a": "x", "b": 3}),
                        ToolCall("c3", "raises", {}),
                    ],
                    ModelStop.tool_use,
                    Usage(10, 5),
                ),
                ModelResponse([Text("5")], ModelStop.end_turn, Usage(10, 5)),
            ]
        )

    with Sandbox([h.add, h.raises], warm=1) as sandbox:
        boxed = sync.run(LoopSpec(), "2+3?", model=script(), tools=sandbox)
    plain = sync.run(LoopSpec(), "2+3?", model=script(), tools=Toolbox([h.add, h.raises]))
    assert boxed.messages == plain.messages and boxed.output == "5"


def test_every_layer_is_reported() -> None:
    layers = available_layers()
    assert list(layers) == list(LAYERS)
    assert all(isinstance(layer, Layer) and layer.detail for layer in layers.values())


def test_requiring_a_layer_not_in_force_refuses_to_build_the_sandbox() -> None:
    with pytest.raises(SandboxUnavailable, match=r"network_namespace: not used: the limits allow"):
        Sandbox([h.add], SandboxLimits(network=True), require=["network_namespace"])
    with pytest.raises(ValueError, match="unknown sandbox layer 'chroot'"):
        Sandbox([h.add], require=["chroot"])


def test_tools_that_cannot_be_imported_by_path_are_refused() -> None:
    @tool
    def local() -> str:
        return "x"

    with pytest.raises(ValueError, match="cannot be imported"):
        Sandbox([local])
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        Sandbox([h.add, "tests.executors.hostile_tools:add"])


def test_a_closed_sandbox_fails_calls_as_errors() -> None:
    sandbox = Sandbox([h.add], warm=1)
    sandbox.close()
    content, is_error = sandbox.run("add", {"a": 1, "b": 2})
    assert is_error and "the sandbox is closed" in content
    assert h.leftovers() == []


def test_a_launcher_imports_the_sandbox_and_the_core_from_the_hosts_image() -> None:
    """A cold call compiles none of turnstile's modules, with or without bytecode caches: the
    host compiled them once and handed the launcher their code."""
    content, is_error = run(Sandbox([h.how_turnstile_was_loaded]), "how_turnstile_was_loaded")
    loaded = msgspec.json.decode(content)
    assert not is_error
    assert loaded["child"] == "Image"
    assert loaded["core"] == "type"  # the `Image` class is its own loader
    assert loaded["file"].endswith(os.path.join("turnstile", "core", "_tools.py"))


def test_a_launcher_skips_site_only_when_the_host_imports_without_other_finders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnstile.executors.sandbox import _host

    class Plain:  # stands for the finders of a plain interpreter
        __module__ = "_frozen_importlib_external"

    monkeypatch.setattr(sys, "meta_path", [Plain()])
    plain = _host._site_hooks()
    monkeypatch.undo()
    assert not plain
    assert _host._site_hooks()  # pytest's assertion rewriter: a finder a plain one lacks
    content, _ = run(Sandbox([h.how_turnstile_was_loaded]), "how_turnstile_was_loaded")
    assert msgspec.json.decode(content)["site"] == "True"
    monkeypatch.setattr(_host, "_site_hooks", lambda: False)
    content, _ = run(Sandbox([h.how_turnstile_was_loaded]), "how_turnstile_was_loaded")
    assert msgspec.json.decode(content)["site"] == "False"


def test_the_dirs_of_a_killed_host_s_sandboxes_are_removed_by_the_next_one() -> None:
    """A host killed with -9 leaves its sandboxes' dirs (a home, a call's work dir); the next
    process to make one removes those of processes no longer running, and no one else's."""
    import subprocess

    from turnstile.executors.sandbox import _workdir

    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from turnstile.executors.sandbox import _workdir\n"
            "import os\nd = _workdir.home()\nopen(os.path.join(d, 'left'), 'w').close()\n"
            "print(d)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # the process exits without removing it, as a killed one would
    assert os.path.isdir(made)
    mine = _workdir.home()
    try:
        assert not os.path.exists(made)
        again = _workdir.home()
        assert os.path.isdir(mine)  # a running process's dir stays
        _workdir.remove(again)
    finally:
        _workdir.remove(mine)
        _workdir.remove(made)
