"""What of the host a sandboxed call can reach. A call's root holds only what it needs, its IPC
objects are its own, and only the address families it needs exist for it.

Each test makes the host object the escape goes for, shows the escape works in-process (so a
test cannot pass because its tool is broken), and shows a sandboxed call cannot reach the
object. Each runs under every tier (`TIERS`), and is skipped, naming the reason, where this
host cannot give the tier or its layer is not in force in it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from turnstile.executors import invoke
from turnstile.executors.sandbox import Sandbox, SandboxLimits

from . import escape_tools as e
from . import hostile_tools as h
from .test_sandbox_tiers import TIER_NAMES, layers_of, needs_all, needs_tier, sandbox_of

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [
    e.overwrites_shared_memory,
    e.takes_message,
    e.leaves_message,
    e.reads,
    e.touches,
    e.connects_unix,
    e.opens_sockets,
    e.keeps_sqlite,
]


@pytest.fixture(scope="module", params=TIER_NAMES)
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def box(tier: str) -> Iterator[Sandbox]:
    with sandbox_of(tier, TOOLS, SandboxLimits(wall_s=10), warm=1) as sandbox:
        yield sandbox


NEW_LAYERS = ("ipc_namespace", "private_root", "private_locks", "socket_families")


def test_the_new_layers_are_reported_and_can_be_required(tier: str) -> None:
    found = layers_of(tier)
    assert all(found[name].detail for name in NEW_LAYERS)
    required = [name for name in NEW_LAYERS if found[name].in_force]
    sandbox_of(tier, [e.reads], require=required).close()


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory any user may enter, in the host's /tmp."""
    path = Path(tempfile.mkdtemp(prefix="turnstile-host-"))
    path.chmod(0o755)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def test_a_host_sysv_segment_cannot_be_read_or_overwritten(box: Sandbox) -> None:
    needs_all(box.layers, "ipc_namespace")
    key = 0x7A000000 | (os.getpid() & 0xFFFF)
    shm = e.shm_create(key, b"host secret")
    try:
        assert e.shm_read(key) == "host secret"  # in-process, the tool would find it
        assert box.run("overwrites_shared_memory", {"key": key}) == ("ENOENT", False)
        assert e.shm_read(key) == "host secret"
    finally:
        e.shm_remove(shm)
    assert h.leftovers() == []


def test_a_host_posix_queue_cannot_be_read(box: Sandbox) -> None:
    needs_all(box.layers, "ipc_namespace")
    name = f"/turnstile-host-{uuid.uuid4().hex}"
    assert e.mq_send(name, "host message", create=True) == "ok"
    try:
        assert box.run("takes_message", {"name": name}) == ("ENOENT", False)
        assert e.mq_take(name) == "host message"  # still there for the host
    finally:
        e.libc.mq_unlink(name.encode())


def test_a_queue_left_by_one_call_is_gone_for_the_next_and_never_on_the_host(
    box: Sandbox,
) -> None:
    needs_all(
        box.layers, "ipc_namespace", "private_root"
    )  # Landlock lets a call write only its own queues
    name = f"/turnstile-left-{uuid.uuid4().hex}"
    try:
        assert box.run("leaves_message", {"name": name, "text": "for the next"}) == ("ok", False)
        assert box.run("takes_message", {"name": name}) == ("ENOENT", False)
        assert e.mq_take(name) == "ENOENT"
    finally:
        e.libc.mq_unlink(name.encode())


def test_host_files_in_shared_memory_and_tmp_are_not_there(box: Sandbox, world: Path) -> None:
    needs_all(box.layers, "private_root")
    shm = Path("/dev/shm") / f"turnstile-host-{uuid.uuid4().hex}"
    canary = world / "canary"
    for path in (shm, canary):
        path.write_text("host secret")
        path.chmod(0o666)
    try:
        paths = [str(shm), str(canary)]
        assert set(json.loads(invoke(e.reads, {"paths": paths}).content).values()) == {
            "host secret"
        }
        found = json.loads(box.run("reads", {"paths": paths}).content)
        assert found == dict.fromkeys(paths, "FileNotFoundError")
    finally:
        shm.unlink()


_PROJECT = """
import json, os, sys
sys.path.insert(1, sys.argv[1])
from tests.executors import escape_tools as e
from turnstile.executors import invoke
from turnstile.executors.sandbox import Sandbox
paths = sys.argv[2:]
control = invoke(e.reads, {"paths": paths})
with Sandbox([e.reads, "agent:lists"], tier=os.environ["TIER"]) as box:
    boxed = box.run("reads", {"paths": paths})
    seen = box.run("lists", {"path": os.getcwd()})
print(json.dumps([json.loads(control.content), boxed.content, boxed.is_error, seen.content]))
"""
_AGENT = '''
import os

def lists(path: str) -> list[str]:
    """What the call sees in `path`."""
    return sorted(os.listdir(path))
'''


def test_a_project_dir_on_sys_path_and_home_show_only_the_tools_modules(
    tmp_path: Path, world: Path, tier: str
) -> None:
    needs_tier(tier)
    needs_all(layers_of(tier), "private_root")
    if not os.access(ROOT, os.W_OK):
        pytest.skip(f"needs to leave a canary in {ROOT}, which this user may not write")
    project = tmp_path / "app"  # below a directory others may not enter, like /root/app
    project.mkdir()
    (project / "agent.py").write_text(_AGENT)  # a tool's module of the project's own
    for where in (project / ".env", world / ".netrc", ROOT / f".canary-{uuid.uuid4().hex}"):
        where.write_text("SECRET=host")
        where.chmod(0o644)
    paths = [str(project / ".env"), str(world / ".netrc"), str(ROOT / "pyproject.toml")]
    canary = next(ROOT.glob(".canary-*"))
    try:
        host = subprocess.run(
            [sys.executable, "-c", _PROJECT, str(ROOT), *paths, str(canary)],
            env={**os.environ, "HOME": str(world), "TIER": tier},
            cwd=project,  # on sys.path as ''
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        canary.unlink()
    control, boxed, is_error, seen = json.loads(host.stdout)
    assert control[str(project / ".env")] == "SECRET=host"
    assert not is_error and set(json.loads(boxed).values()) == {"FileNotFoundError"}
    assert json.loads(seen) == ["agent.py"]  # of the project dir, only the tool's module


def test_host_files_cannot_be_touched_locked_or_tagged(box: Sandbox, world: Path) -> None:
    needs_all(box.layers, "private_root")
    target, lock = world / "shared", world / "host.lock"
    target.write_text("host data")
    target.chmod(0o666)
    lock.write_text("")
    lock.chmod(0o644)
    before = target.stat().st_mtime_ns
    assert invoke(e.touches, {"path": str(target), "lock": str(lock)}).content.count("ok") == 3
    os.utime(target, ns=(before, before))
    os.removexattr(target, "user.turnstile")
    outcome = box.run("touches", {"path": str(target), "lock": str(lock)})
    assert set(json.loads(outcome.content).values()) == {"FileNotFoundError"}
    assert target.stat().st_mtime_ns == before and os.listxattr(target) == []


def test_no_lock_a_call_takes_on_a_file_of_its_root_reaches_the_host(
    world: Path, tier: str
) -> None:
    needs_tier(tier)
    needs_all(layers_of(tier), "private_locks")
    world.chmod(0o777)  # where the call and the host meet
    paths = [os.path.realpath(p) for p in (sys.executable, os.__file__, e.__file__)]
    limits = SandboxLimits(wall_s=30, writable_paths=(str(world),))
    with sandbox_of(tier, [e.holds_locks], limits) as box, ThreadPoolExecutor(1) as pool:
        call = pool.submit(box.run, "holds_locks", {"paths": paths, "meeting": str(world)})
        try:
            for _ in range(2000):
                if (world / "ready").exists() or call.done():
                    break
                time.sleep(0.01)
            assert (world / "ready").exists(), call.result()
            seen = {path: e.locks_seen(path) for path in paths}
        finally:
            (world / "looked").write_text("")
        taken = json.loads(call.result().content)
    assert all(taken[path]["flock"] == "ok" for path in paths), taken  # the call holds them
    assert seen == {path: [] for path in paths}, taken


_MOUNTED = """
import json, os, subprocess, sys
package, over = sys.argv[1:]
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", package + "/data"], check=True)
with open(package + "/data/inside.txt", "w") as f:
    f.write("a mount below")
subprocess.run(["mount", "--bind", over, package + "/conf.txt"], check=True)
sys.path.insert(0, os.path.dirname(package))
from turnstile.executors.sandbox import Sandbox
with Sandbox(["mounted:reads"]) as box:
    found = box.run("reads", {"paths": [package + "/data/inside.txt", package + "/conf.txt"]})
print(json.dumps([found.content, found.is_error]))
"""
_READS = '''
from pathlib import Path

def reads(paths: list[str]) -> list[str]:
    """The text of each of `paths`."""
    return [Path(path).read_text() for path in paths]
'''


def test_a_mount_below_a_path_of_the_root_shows_in_it(tmp_path: Path) -> None:
    needs_tier("full")
    needs_all(layers_of("full"), "private_root")
    if os.geteuid() != 0:
        pytest.skip("needs root to mount below a path of the root (unshare --mount)")
    package = tmp_path / "mounted"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text(_READS)
    (package / "conf.txt").write_text("the file under the mount")
    (tmp_path / "over.txt").write_text("a file mounted on another")
    in_own_mounts = ["unshare", "--mount", "--propagation", "private", sys.executable]
    host = subprocess.run(
        [*in_own_mounts, "-c", _MOUNTED, str(package), str(tmp_path / "over.txt")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    content, is_error = json.loads(host.stdout or "[null, null]")
    assert json.loads(content) == ["a mount below", "a file mounted on another"], host.stderr
    assert not is_error


def test_sqlite_in_the_call_s_work_dir_locks_as_usual(box: Sandbox) -> None:
    outcome = box.run("keeps_sqlite", {})
    assert json.loads(outcome.content) == [["kept", "too"], "database is locked"], outcome


def test_a_unix_socket_on_the_host_is_unreachable(box: Sandbox, world: Path) -> None:
    needs_all(box.layers, "private_root")
    path = str(world / "listener.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        os.chmod(path, 0o666)
        server.listen()
        assert invoke(e.connects_unix, {"path": path}).content == "connected"
        server.accept()[0].close()
        outcome = box.run("connects_unix", {"path": path})
        server.settimeout(0.3)
        with pytest.raises(TimeoutError):
            server.accept()
    assert outcome.is_error and "FileNotFoundError" in outcome.content


FAMILIES = ["AF_UNIX", "AF_INET", "AF_INET6", "AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_ALG"]


def test_only_unix_sockets_exist_for_a_call_without_network(box: Sandbox) -> None:
    needs_all(box.layers, "socket_families")
    control = json.loads(invoke(e.opens_sockets, {"families": FAMILIES}).content)
    assert control["AF_UNIX"] == control["AF_NETLINK"] == "ok"
    found = json.loads(box.run("opens_sockets", {"families": FAMILIES}).content)
    assert found.pop("AF_UNIX") == "ok"
    assert found.pop("AF_INET") == found.pop("AF_INET6") == "ENETUNREACH"  # "no network"
    assert set(found.values()) == {"EAFNOSUPPORT"}, found


def test_with_network_ip_sockets_are_added_and_no_other(tier: str) -> None:
    needs_tier(tier)
    needs_all(layers_of(tier), "socket_families")
    with sandbox_of(tier, [e.opens_sockets], SandboxLimits(network=True)) as sandbox:
        found = json.loads(sandbox.run("opens_sockets", {"families": FAMILIES}).content)
    assert [found.pop(name) for name in ("AF_UNIX", "AF_INET", "AF_INET6")] == ["ok"] * 3
    assert set(found.values()) == {"EAFNOSUPPORT"}, found
