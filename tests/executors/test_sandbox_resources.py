"""A call gets its share and nothing of the call before it: no argument of an earlier call in
its memory, no file an earlier call left, no memory, CPU or disk beyond its limits however it
spreads them, and no success it did not return cleanly.

Each test runs real sandboxed calls of tools in `resource_tools`; one that needs a layer this
machine cannot enforce is skipped, naming why."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from turnstile.executors.sandbox import LAYERS, Sandbox, SandboxLimits, available_layers

from . import hostile_tools as h
from . import resource_tools as r
from .test_sandbox_tiers import TIER_NAMES, layers_of, needs_all, needs_tier, sandbox_of

MiB = 1024 * 1024
PREFIX = "turnstile-secret-"


def needs(*layers: str) -> None:
    """Skip unless the full tier (a `Sandbox`'s default) and `layers` of it are in force."""
    needs_tier("full")
    needs_all(layers_of("full"), *layers)


def run(box: Sandbox, name: str, **arguments: object) -> tuple[str, bool]:
    outcome = box.run(name, arguments)
    assert h.leftovers() == []
    return outcome.content, outcome.is_error


def shmem() -> int:
    """The machine's shared memory in use (memfds, SysV segments, tmpfs files), in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def soon(condition: Callable[[], bool], within_s: float = 5.0) -> bool:
    """Whether `condition` holds now or within `within_s` (looked at every 20 ms)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(scope="module", params=TIER_NAMES)
def warm(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    tools = [r.remember, r.recall, r.whoami, r.buries, r.looks_around, r.forges_then_crashes]
    limits = SandboxLimits(wall_s=20, cpu_s=20)
    with sandbox_of(request.param, tools, limits, warm=1) as sandbox:
        yield sandbox


def test_no_later_call_of_a_warm_launcher_finds_an_earlier_call_s_arguments(
    warm: Sandbox,
) -> None:
    secret = PREFIX + uuid.uuid4().hex
    assert run(warm, "remember", secret=secret) == ("noted", False)
    for _ in range(3):  # the trees made ahead while and after the secret's call ran
        content, is_error = run(warm, "recall", prefix=PREFIX)
        assert not is_error and secret not in content
    planted = PREFIX + uuid.uuid4().hex  # the control: a call's own argument is found
    content, is_error = run(warm, "recall", prefix=PREFIX, plant=planted)
    assert not is_error and json.loads(content) == [planted]


def test_a_deep_tree_and_a_flood_of_files_are_gone_before_the_next_call(warm: Sandbox) -> None:
    content, is_error = run(warm, "buries", depth=1500, files=30_000)
    back = time.monotonic()
    assert not is_error, content
    buried = json.loads(content)
    assert buried["files"] > 0
    assert not os.path.exists(buried["workdir"])
    if warm.layers["workdir_tmpfs"].in_force:
        assert back - buried["returned_at"] < 1.0  # the kernel drops the tmpfs, files and all
    content, is_error = run(warm, "looks_around")
    assert (json.loads(content), is_error) == ({"workdir": [], "others": []}, False)


def test_a_user_id_is_not_given_to_the_very_next_call(warm: Sandbox) -> None:
    needs_all(warm.layers, "separate_uid")
    uids = [run(warm, "whoami")[0] for _ in range(3)]
    assert len(set(uids)) == 3


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("fills_memfds", {"count": 48, "mebibytes": 16}),
        ("fills_workdir", {"files": 48, "mebibytes": 8}),
    ],
)
def test_memory_outside_the_address_space_counts_towards_the_call_s_memory(
    name: str, arguments: dict[str, int]
) -> None:
    needs("cgroup", *(["workdir_tmpfs"] if name == "fills_workdir" else []))
    limits = SandboxLimits(memory_bytes=256 * MiB, disk_bytes=512 * MiB)
    before = shmem()
    with Sandbox([r.fills_memfds, r.fills_workdir], limits, require=["cgroup"]) as box:
        content, is_error = run(box, name, **arguments)
    assert (content, is_error) == (
        f"{name} was killed: its processes together used more than 256 MiB of memory "
        "(the sandbox's memory limit)",
        True,
    )
    assert shmem() < before + 64 * MiB  # nothing of it outlives the call


def test_sysv_shared_memory_counts_towards_the_call_s_memory() -> None:
    needs("cgroup")
    key, before = 0x7500_0000 + os.getpid() % 0x10000 * 64, shmem()
    try:
        with Sandbox([r.fills_sysv_shm], SandboxLimits(memory_bytes=256 * MiB)) as box:
            content, is_error = run(box, "fills_sysv_shm", key=key, count=48, mebibytes=16)
        assert (content, is_error) == (
            "fills_sysv_shm was killed: its processes together used more than 256 MiB of memory "
            "(the sandbox's memory limit)",
            True,
        )
        if "ipc_namespace" in LAYERS and available_layers()["ipc_namespace"].in_force:
            # the segments go with the call's IPC namespace, which the kernel frees in a work
            # item of its own, moments after the namespace's last process and mount are gone
            assert soon(lambda: shmem() < before + 64 * MiB)
    finally:
        r.remove_segments(key, 48)


def test_cpu_time_spread_over_forks_is_stopped_at_the_call_s_cpu_limit() -> None:
    needs("cgroup")
    with Sandbox([r.burns_in_forks], SandboxLimits(cpu_s=1, wall_s=30)) as box:
        content, is_error = run(box, "burns_in_forks", children=4, seconds=0.8)
    assert (content, is_error) == (
        "burns_in_forks was stopped after 1 s of CPU time (the sandbox's CPU limit)",
        True,
    )


def test_the_work_dir_is_full_at_the_disk_limit() -> None:
    needs("workdir_tmpfs")
    with Sandbox([r.fills_workdir], SandboxLimits(disk_bytes=64 * MiB)) as box:
        content, is_error = run(box, "fills_workdir", files=5, mebibytes=15)
    assert is_error and content.startswith(
        "fills_workdir failed: OSError: [Errno 28] No space left on device"
    )
    assert content.endswith("(the sandbox's work dir holds at most 64 MiB)")


def test_a_result_written_by_hand_does_not_survive_a_crash(warm: Sandbox) -> None:
    assert run(warm, "forges_then_crashes", crash="segfault") == (
        "forges_then_crashes crashed: killed by SIGSEGV",
        True,
    )
    for crash in ("raise", "return"):
        assert run(warm, "forges_then_crashes", crash=crash) == (
            "forges_then_crashes wrote to the sandbox's result pipe itself; "
            "its result cannot be trusted",
            True,
        )


def test_a_cgroup_left_by_a_killed_launcher_whose_pid_came_back_stops_no_call() -> None:
    """pids are reused (32,768 of them on many machines): a launcher killed before it could
    remove its calls' cgroups must not make a later launcher with its pid fail to make its
    own."""
    needs("cgroup")
    from turnstile.executors.sandbox import _cgroup

    hierarchy = _cgroup.hierarchy()
    taken = [
        os.path.join(d, f"turnstile-{os.getpid()}-{n}") for d in hierarchy.dirs for n in range(64)
    ]
    for d in taken:
        os.mkdir(d)
    try:
        made = _cgroup.Cgroup(hierarchy, SandboxLimits())
        made.remove()
    finally:
        for d in taken:
            os.rmdir(d)


def test_the_empty_cgroups_of_dead_launchers_are_swept() -> None:
    needs("cgroup")
    from turnstile.executors.sandbox import _cgroup

    hierarchy = _cgroup.hierarchy()
    dead = [os.path.join(d, "turnstile-4194305-0-feed") for d in hierarchy.dirs]  # > pid_max
    alive = [os.path.join(d, f"turnstile-{os.getpid()}-9999-feed") for d in hierarchy.dirs]
    for d in dead + alive:
        os.mkdir(d)
    try:
        _cgroup.sweep(hierarchy)
        assert [d for d in dead if os.path.exists(d)] == []
        assert [d for d in alive if os.path.exists(d)] == alive
    finally:
        for d in dead + alive:
            if os.path.exists(d):
                os.rmdir(d)


def test_joining_a_call_s_cgroup_moves_the_whole_process_in_every_hierarchy() -> None:
    """init joins by moving its one thread (v1's `tasks`: no global lock, no RCU grace period
    of ~15 ms); the process is then in the call's cgroup of each hierarchy."""
    needs("cgroup")
    from turnstile.executors.sandbox import _cgroup

    made = _cgroup.Cgroup(_cgroup.hierarchy(), SandboxLimits())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            made.join()
            with open("/proc/self/cgroup") as f:
                os.write(write, f.read().encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        listed = f.read()
    made.remove()
    name = os.path.basename(made.dirs[0])
    joined = [line for line in listed.splitlines() if line.endswith("/" + name)]
    assert len(joined) == len(made.dirs), listed
