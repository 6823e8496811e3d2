"""Confining the tool's process before any tool code runs: descriptors, address families,
environment, limits, Landlock, an unprivileged uid, seccomp — in that order, each step reported
as a `Layer`.

Order matters: limits and Landlock are set while still root (and become irrevocable once the
uid changes), and seccomp comes last so that it need not allow the steps before it.
"""

from __future__ import annotations

__all__ = ["AT_CALL", "confine", "plumb", "rehearse"]

import os
import resource
from collections.abc import Callable

from . import _landlock as landlock
from . import _seccomp as seccomp
from ._layers import LAYERS, Layer
from ._linux import drop_capabilities, no_new_privs
from ._view import interpreter_paths, unreadable
from ._wire import Call

RESULT_FD = 3
_PATH = "/usr/local/bin:/usr/bin:/bin"


def plumb(result_fd: int, output_fd: int) -> None:
    """stdin from /dev/null, stdout and stderr into the output pipe, the result pipe on fd 3,
    and no other descriptor inherited from the launcher."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    if result_fd != RESULT_FD:
        os.dup2(result_fd, RESULT_FD)
    os.closerange(RESULT_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _environment(home: str) -> None:
    os.environ.clear()
    os.environ.update(PATH=_PATH, HOME=home, TMPDIR=home, LANG="C.UTF-8")


def rehearse() -> None:
    """Set a call's environment with "/" for its work dir, in a process waiting for its call:
    the first change to the environment after a fork is slow, the call's own is then not."""
    _environment("/")


def _scrub_env(call: Call) -> str:
    _environment(call.workdir)
    os.chdir(call.workdir)
    return "only PATH, HOME, TMPDIR and LANG; HOME and cwd are the work dir"


def _set(which: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY and os.geteuid() != 0:
        soft, hard = min(soft, current), min(hard, current)
    resource.setrlimit(which, (soft, hard))


def _rlimits(call: Call) -> str:
    limits = call.limits
    _set(resource.RLIMIT_AS, limits.memory_bytes)
    _set(resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1)
    _set(resource.RLIMIT_FSIZE, limits.file_bytes)
    _set(resource.RLIMIT_NOFILE, limits.open_files)
    _set(resource.RLIMIT_CORE, 0)
    detail = "address space, CPU time, file size, open files"
    if call.uid is None:
        return detail + "; processes only with separate_uid"
    _set(resource.RLIMIT_NPROC, limits.processes)
    return detail + ", processes"


def _no_new_privs(call: Call) -> str:
    no_new_privs()
    if os.geteuid() == 0:
        return "no exec can gain privileges"
    drop_capabilities()  # those its user namespace gave it
    return "no exec can gain privileges; no capabilities, in its user namespace either"


_readable: tuple[str, ...] = ()
"""The host paths a call without a root of its own may read (set by `confine`)."""
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


def _landlock(call: Call) -> str:
    writable = [call.workdir, *call.limits.writable_paths, os.devnull]
    if "private_root" in call.layers or call.probe:  # (a probe tries every layer)
        if not call.probe:
            writable += ["/dev/shm", "/dev/mqueue"]  # the call's own, in its own root
        return landlock.restrict(writable, network=call.limits.network)
    # no root of its own: what it may read is limited as its root would be (no host's /proc)
    own = (*_readable, *_DEVICES, f"/proc/{os.getpid()}")  # /proc/self: its own, no other
    readable = [p for p in own if "\0" not in p and os.path.exists(p)]
    return landlock.restrict(writable, network=call.limits.network, readable=readable)


def _separate_uid(call: Call) -> str:
    if call.uid is None:
        raise OSError("needs root to switch to a user of its own")
    os.setgroups([])
    os.setresgid(call.uid, call.uid, call.uid)
    os.setresuid(call.uid, call.uid, call.uid)
    blocked = unreadable(interpreter_paths()) if call.probe else None
    if blocked is not None:
        raise OSError(f"a user of its own could not read {blocked}")
    return "a uid of its own per call, no capabilities"


def _socket_families(call: Call) -> str:
    return seccomp.load("socket_families", network=call.limits.network, privileged=_privileged)


def _seccomp(call: Call) -> str:
    return seccomp.load("seccomp", network=call.limits.network, privileged=_privileged)


AT_CALL = ("no_new_privs", "separate_uid")
"""The steps a call's process made ahead of its call leaves for when the call comes: those
that take the call's uid, or that would make the process look confined (no_new_privs) before
any call is in it. It takes the others ahead, holding the privileges they then need."""
_privileged = False
"""Whether the steps now taken are taken ahead, before no_new_privs (see `AT_CALL`)."""

_STEPS: tuple[tuple[str, Callable[[Call], str]], ...] = (
    ("socket_families", _socket_families),
    ("scrubbed_env", _scrub_env),
    ("rlimits", _rlimits),
    ("no_new_privs", _no_new_privs),
    ("landlock", _landlock),
    ("separate_uid", _separate_uid),
    ("seccomp", _seccomp),
)


def confine(
    call: Call,
    wanted: set[str],
    layers: dict[str, Layer],
    readable: tuple[str, ...] = (),
    steps: tuple[str, ...] = LAYERS,
) -> bool:
    """Apply each wanted step of `steps`, recording how it went in `layers`. A real call stops
    at the first failure (returns False); a probe tries them all. Without a root of its own,
    the call may read only `readable` of the host (and its work dir, writable paths and
    devices). Without no_new_privs among `steps`, the others are taken ahead of the call, with
    the privileges (CAP_SYS_ADMIN) they then need."""
    global _readable, _privileged
    _readable = readable
    _privileged = "no_new_privs" not in steps
    for name, step in _STEPS:
        if name not in wanted or name not in steps:
            continue
        try:
            layers[name] = Layer(True, step(call))
        except OSError as e:
            layers[name] = Layer(False, e.strerror or str(e))
            if not call.probe:
                return False
    return True
