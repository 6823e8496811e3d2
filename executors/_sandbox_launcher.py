"""The launcher: a clean interpreter that forks one confined process tree per call.

The host starts it (`python -I -c BOOT`) in its own session with a scrubbed environment, then
sends `Call`s over a unix socket. A cold sandbox uses a launcher for one call; a warm one keeps
it and forks from it again, which costs a fork instead of an interpreter start. Per call:

    launcher ─ fork ─> init (pid 1 of a new pid namespace; new mount and net namespaces)
                        └─ fork ─> tool process (confined, then runs the tool)

When the tool's process exits, init exits, and the kernel kills whatever is left in the
namespace. `Kill` from the host SIGKILLs init (same effect). Without pid namespaces the launcher
is a child subreaper instead, so orphans come back to it and are killed before `Done`.
"""

from __future__ import annotations

__all__ = ["main"]

import contextlib
import errno
import gc
import os
import select
import signal
import socket

from . import _sandbox_child as child
from . import _sandbox_seccomp as seccomp
from ._sandbox_layers import LAYERS, Layer
from ._sandbox_linux import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    children,
    mount_proc,
    private_mounts,
    set_child_subreaper,
    set_parent_death_signal,
    setns,
    unshare,
)
from ._sandbox_view import reveal
from ._sandbox_wire import Call, Done, Exited, Kill, frame, receive, send

_STRAYS = 3  # init's exit code when processes outlived the tool's


def _failed(e: OSError) -> Layer:
    needs = " (needs root, or CAP_SYS_ADMIN)" if e.errno == errno.EPERM else ""
    return Layer(False, (e.strerror or str(e)) + needs)


def _own_layers() -> dict[str, Layer]:
    """The layers the launcher itself provides, for every call."""
    layers = {"session": Layer(True, "own session, no controlling terminal, killed as a group")}
    if os.getsid(0) != os.getpid():
        layers["session"] = Layer(False, "the launcher is not a session leader")
    try:
        set_child_subreaper()
        layers["subreaper"] = Layer(True, "orphans of a call come back to be killed")
    except OSError as e:
        layers["subreaper"] = _failed(e)
    return layers


def _still_running() -> bool:
    """Reap exited children; True if any child is still running."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _init(call: Call, wanted: set[str], layers: dict[str, Layer], fds: list[int]) -> None:
    """The call's init: finish the namespaces, fork the tool's process, wait for it, and say
    how it ended. Its exit makes the kernel kill the rest of the pid namespace."""
    set_parent_death_signal(signal.SIGKILL)
    if "mount_namespace" in wanted:
        try:
            if not layers.get("pid_namespace", Layer(False, "")).in_force:
                raise OSError("needs pid_namespace")
            unshare(CLONE_NEWNS)
            private_mounts()
            covered = reveal([*call.needed, call.workdir])
            mount_proc()
            detail = "private /proc: only the call's processes"
            if covered:
                detail += f"; {', '.join(covered)} hidden but for the paths the call needs"
            layers["mount_namespace"] = Layer(True, detail)
        except OSError as e:
            layers["mount_namespace"] = _failed(e)
    if "network_namespace" in wanted:
        try:
            unshare(CLONE_NEWNET)
            layers["network_namespace"] = Layer(True, "no interface but a loopback that is down")
        except OSError as e:
            layers["network_namespace"] = _failed(e)
    result_fd, output_fd, status_fd = fds
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        child.run(call, wanted, layers, result_fd, output_fd)
    os.close(result_fd)
    os.close(output_fd)
    while True:
        reaped, wait_status = os.waitpid(-1, 0)
        if reaped == pid:
            break
    os.write(status_fd, frame(Exited(wait_status)))
    os._exit(_STRAYS if _still_running() else 0)


def _sweep() -> bool:
    """Kill and reap every remaining child (orphans re-parented to this subreaper); True if
    any was still running."""
    found = False
    while _still_running():
        found = True
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return found


def _supervise(sock: socket.socket, pid: int) -> tuple[bool, bool, bool]:
    """Wait for the call's init, killing it on `Kill` or if the host goes away.
    Returns (killed, strays, host gone)."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock, select.POLLIN)
    killed = gone = False
    try:
        while not any(fd == pidfd for fd, _ in poller.poll()):
            got = receive(sock)
            for fd in [] if got is None else got[1]:
                os.close(fd)
            if got is None or isinstance(got[0], Kill):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                killed, gone = True, got is None
                poller.unregister(sock)
        _, wait_status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    strays = os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == _STRAYS
    return killed, _sweep() or strays, gone


def _start(
    sock: socket.socket,
    call: Call,
    fds: list[int],
    own: dict[str, Layer],
    own_pid_namespace: int,
) -> int:
    """Fork the call's init (into a new pid namespace if wanted); returns its pid."""
    wanted = set(LAYERS) if call.probe else set(call.layers)
    layers = {name: layer for name, layer in own.items() if name in wanted}
    in_namespace = False
    if "pid_namespace" in wanted:
        try:
            unshare(CLONE_NEWPID)
            in_namespace = True
            layers["pid_namespace"] = Layer(True, "the call's processes die with it")
        except OSError as e:
            layers["pid_namespace"] = _failed(e)
    gc.freeze()  # fewer copy-on-write faults in the children: the collector leaves these be
    pid = os.fork()
    if pid == 0:
        try:
            sock.close()
            os.close(own_pid_namespace)
            _init(call, wanted, layers, fds)
        finally:
            os._exit(70)
    if in_namespace:
        setns(own_pid_namespace, CLONE_NEWPID)
    return pid


def main(sock_fd: int) -> None:
    """Serve calls from the host until it hangs up (or dies: the socket tells either way)."""
    sock = socket.socket(fileno=sock_fd)
    own = _own_layers()
    with contextlib.suppress(OSError):
        seccomp.version()  # loads libseccomp here, once, for every call's process to inherit
    own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    while (got := receive(sock)) is not None:
        message, fds = got
        if not isinstance(message, Call):
            for fd in fds:
                os.close(fd)
            continue
        pid = _start(sock, message, fds, own, own_pid_namespace)
        for fd in fds:
            os.close(fd)
        killed, strays, gone = _supervise(sock, pid)
        if gone:
            break
        send(sock, Done(killed, strays))
    os._exit(0)  # nothing to finalize; spares the host's wait
