"""A cgroup per call: all of a call's processes together within its memory, process and CPU
limits.

Rlimits count per process: a call that forks, or keeps memory no address space shows (memfds,
SysV shared memory, its work dir's tmpfs), gets round them. So each call's process tree joins
a cgroup of its own, made with the tree (ahead of its call, in a warm launcher) and removed
once the tree is gone. Its memory limit is `memory_bytes` for everything the call's processes
are charged (shared memory and tmpfs pages included): over it, the kernel kills one of them and
the launcher names the limit. Its pids limit is `processes` (plus the call's init). Its CPU
time the launcher reads as the call runs, killing the call at `cpu_s` in all.

cgroup v2 where the memory and pids controllers are delegated to calls' cgroups, else v1 (the
memory, pids and cpuacct hierarchies). Either needs root or a cgroup delegated to this user.
"""

from __future__ import annotations

__all__ = ["Cgroup", "Hierarchy", "remove_leftovers", "sweep", "where"]

import contextlib
import errno
import functools
import itertools
import os
import time

import msgspec

from ._limits import SandboxLimits
from ._linux import write_file

_V1 = ("memory", "pids", "cpuacct")
_V2 = ("memory", "pids")
_names = itertools.count()


class Hierarchy(msgspec.Struct, frozen=True):
    """Where calls' cgroups go: v2, one directory; v1, one for each of memory, pids, cpuacct.
    Found by the host (once), used by its launchers."""

    version: int
    dirs: tuple[str, ...]


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mounts() -> dict[str, tuple[str, str]]:
    """The cgroup hierarchies mounted here: controller ("" for v2) -> (mount point, the
    hierarchy's path mounted there)."""
    found: dict[str, tuple[str, str]] = {}
    for line in _read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1 :]
        if tail[0] == "cgroup2":
            found.setdefault("", (fields[4], fields[3]))
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                found.setdefault(option, (fields[4], fields[3]))
    return found


def _own_dir(controller: str, mounts: dict[str, tuple[str, str]], own: dict[str, str]) -> str:
    """The directory of this process's cgroup in `controller`'s hierarchy ("" for v2)."""
    if controller not in mounts or controller not in own:
        raise OSError(errno.ENOENT, f"no {controller or 'v2'} hierarchy mounted")
    point, root = mounts[controller]
    root, path = root.rstrip("/"), own[controller].rstrip("/")
    if path != root and not path.startswith(root + "/"):
        raise OSError(errno.ENOENT, f"this process's {controller or 'v2'} cgroup is not mounted")
    return point.rstrip("/") + path[len(root) :]


def _v2(own: str, at_root: bool) -> Hierarchy:
    """v2: calls' cgroups go below this process's cgroup if it is the root, else beside it (a
    cgroup with processes in it cannot give its children controllers), where memory and pids
    must be enabled for children."""
    base = own if at_root else os.path.dirname(own)
    enabled = _read(os.path.join(base, "cgroup.subtree_control")).split()
    if not set(_V2) <= set(enabled):
        raise OSError(errno.ENOENT, f"v2: {base} does not enable memory and pids below it")
    return Hierarchy(2, (base,))


def _pid_of(entry: str) -> int | None:
    """The launcher's pid in a call's cgroup's name, None if it is not one."""
    parts = entry.split("-")
    if len(parts) < 3 or parts[0] != "turnstile" or not parts[1].isdigit():
        return None
    return int(parts[1])


def sweep(where: Hierarchy) -> None:
    """Remove the cgroups that launchers no longer running left (killed, with their host, before
    they could): a cgroup is removed only once empty, so those still in use stay."""
    for d in where.dirs:
        for entry in os.listdir(d):
            pid = _pid_of(entry)
            if pid is not None and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(d, entry))


@functools.cache
def hierarchy() -> Hierarchy:
    """Where this machine lets calls have cgroups (swept once per process); `OSError` saying
    why if nowhere."""
    found = _find()
    sweep(found)
    return found


def _find() -> Hierarchy:
    mounts = _mounts()
    own: dict[str, str] = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    problems = []
    try:
        at_root = own.get("", "").rstrip("/") == mounts.get("", ("", ""))[1].rstrip("/")
        return _v2(_own_dir("", mounts, own), at_root)
    except OSError as e:
        problems.append(e.strerror or str(e))
    try:
        dirs = tuple(_own_dir(controller, mounts, own) for controller in _V1)
    except OSError as e:
        problems.append(f"v1: {e.strerror or e}")
    else:
        if all(os.access(d, os.W_OK) for d in dirs):
            return Hierarchy(1, dirs)
        problems.append("v1: cannot make cgroups (needs root, or a delegated cgroup)")
    raise OSError(errno.ENOENT, "; ".join(problems))


def where() -> Hierarchy | str:
    """Where calls' cgroups go on this machine, or why they cannot have one."""
    try:
        return hierarchy()
    except OSError as e:
        return e.strerror or str(e)


class Cgroup:
    """A call's cgroup, made (with its limits) in the launcher before the call's init is
    forked; init `join`s it, and every process of the call is in it."""

    def __init__(self, where: Hierarchy, limits: SandboxLimits) -> None:
        self.version = where.version
        # the launcher's pid and a count, and a random part: a pid comes back (a killed
        # launcher's cgroups may still be there, `sweep` has not run yet) and counts restart
        name = f"turnstile-{os.getpid()}-{next(_names)}-{os.urandom(4).hex()}"
        self.dirs = tuple(os.path.join(d, name) for d in where.dirs)
        self._start = 0.0
        made = []
        try:
            for d in self.dirs:
                os.mkdir(d, 0o700)
                made.append(d)
            self._limit(limits)
            usage = "cpu.stat" if self.version == 2 else "cpuacct.usage"
            self._usage = os.open(os.path.join(self.dirs[-1], usage), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            for d in made:
                os.rmdir(d)
            raise

    @property
    def detail(self) -> str:
        """What the layer enforces, and how."""
        kind = "v2: memory, pids" if self.version == 2 else "v1: memory, pids, cpuacct"
        return f"{kind}; the call's memory, processes and CPU time together"

    def _limit(self, limits: SandboxLimits) -> None:
        memory, pids = self.dirs[0], self.dirs[1 % len(self.dirs)]  # v1: memory, pids, cpuacct
        names = (
            ("memory.max", "memory.swap.max", "memory.oom.group")
            if self.version == 2
            else ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", None)
        )
        write_file(os.path.join(memory, names[0]), str(limits.memory_bytes))
        swap = os.path.join(memory, names[1])
        if os.path.exists(swap):  # v1 counts memory+swap; v2 swap alone
            write_file(swap, "0" if self.version == 2 else str(limits.memory_bytes))
        if names[2] is not None:
            write_file(os.path.join(memory, names[2]), "1")  # an OOM kills the whole call
        write_file(os.path.join(pids, "pids.max"), str(limits.processes + 1))  # and its init

    def join(self) -> None:
        """Move this process (the call's init, before it forks) into the cgroup. On v1, a
        process of one thread moves its thread (`tasks`): moving a whole process takes a lock
        every fork on the machine takes, and waits an RCU grace period for it (~15 ms here, a
        tree not ready for a call coming soon after the last)."""
        single = self.version == 1 and len(os.listdir("/proc/self/task")) == 1
        for d in self.dirs:
            write_file(os.path.join(d, "tasks" if single else "cgroup.procs"), "0")

    def _cpu_s(self) -> float:
        text = os.pread(self._usage, 4096, 0).decode()
        if self.version == 1:
            return int(text) / 1e9
        return int(text.split("usage_usec", 1)[1].split()[0]) / 1e6

    def begin(self) -> None:
        """The call starts now: its CPU time counts from here (not the tree's readying)."""
        self._start = self._cpu_s()

    def cpu_s(self) -> float:
        """CPU seconds the call's processes have used since `begin`."""
        return self._cpu_s() - self._start

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the call for being over its memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in _read(os.path.join(self.dirs[0], name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        return False

    def remove(self) -> None:
        """Remove the cgroup, once every process of the call is gone."""
        os.close(self._usage)
        for d in self.dirs:
            _rmdir(d)


def _rmdir(path: str) -> None:
    """Remove an empty cgroup, waiting briefly for exited processes to leave it."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return
            time.sleep(0.002)


def remove_leftovers(launcher: int) -> None:
    """Remove the cgroups a killed launcher left (its calls' processes are gone or going)."""
    try:
        dirs = hierarchy().dirs
    except OSError:
        return
    prefix = f"turnstile-{launcher}-"
    for d in dirs:
        for entry in os.listdir(d):
            if entry.startswith(prefix):
                _rmdir(os.path.join(d, entry))
