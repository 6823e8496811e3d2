"""A tree as its launcher sees it (`MadeTree`: its init, the sockets to it and its calls'
processes, its cgroup), and the wait for each of its calls to end (`supervise`)."""

from __future__ import annotations

__all__ = ["MadeTree", "supervise"]

import contextlib
import os
import select
import signal
import socket

from ._cgroup import Cgroup
from ._linux import children, still_running
from ._wire import Done, Exited, Kill, Start, Tree, receive, send

_CPUS = len(os.sched_getaffinity(0))
_LOOK_S = 0.01
"""The shortest wait between two looks at a call's CPU time: it may overrun its limit by as
much CPU time as its processes use in that while."""


class MadeTree:
    """A tree's init (`pid`), serving its calls in turn, each in a process of its own below it,
    made for calls of a `kind`; `up` hears from init, `down` hands a call to its process."""

    def __init__(
        self,
        kind: Tree,
        pid_namespace: bool,
        serves: bool,
        cgroup: Cgroup | None,
        pid: int,
        up: socket.socket,
        down: socket.socket,
    ) -> None:
        self.kind = kind
        self.pid_namespace = pid_namespace
        self.serves = serves
        self.cgroup = cgroup
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.up = up
        self.down = down

    def idle(self) -> bool:
        """Whether init is there and has said nothing since its last call: none of its
        processes was killed from outside while it waited for a call."""
        return self.pidfd >= 0 and not select.select([self.pidfd, self.up.fileno()], [], [], 0)[0]

    def hand(self, start: Start, fds: list[int]) -> bool:
        """Give the call's process its call and the call's pipes (then closed here); False if
        the tree is no longer fit for one."""
        if not self.idle():
            return False
        try:
            send(self.down, start, tuple(fds))
        except OSError:
            return False
        for fd in fds:
            os.close(fd)
        return True

    def answered(self) -> None:
        """Tell init the call is answered: what it does next (kill the call's stopped process,
        make the next) would otherwise take the CPU the answer needs."""
        if self.pidfd >= 0:
            with contextlib.suppress(OSError):  # init is gone: the tree is discarded anyway
                self.up.send(b".")

    def kill(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):  # init has just exited on its own
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def reap(self) -> None:
        """Wait for init to exit (with a pid namespace: for the whole tree to be gone)."""
        if self.pidfd >= 0:
            os.waitpid(self.pid, 0)
            os.close(self.pidfd)
            self.pidfd = -1
            self.up.close()
            self.down.close()

    def close(self) -> None:
        """Reap the tree, then remove its cgroup (after the call's `Done`: off its path).
        Without a pid namespace, what init left running comes back to this subreaper when it
        dies: swept here, unless `supervise` reaped init and swept already."""
        reaping = self.pidfd >= 0
        self.reap()
        if reaping and not self.pid_namespace:
            _sweep()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    def discard(self) -> None:
        """Kill and close a tree."""
        self.kill()
        self.close()


def _sweep() -> bool:
    """Kill and reap every remaining child (orphans re-parented to this subreaper); True if
    any was still running."""
    found = False
    while still_running():
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


def _cpu_wait(tree: MadeTree) -> float | None:
    """Milliseconds until the call could first reach its CPU limit (its processes use at most
    every CPU at once): 0 once it has, None if it has no cgroup to tell."""
    if tree.cgroup is None:
        return None
    left = tree.kind.limits.cpu_s - tree.cgroup.cpu_s()
    return 0 if left <= 0 else max(left / _CPUS, _LOOK_S) * 1000


def supervise(sock: socket.socket, tree: MadeTree) -> tuple[Done, bool]:
    """Wait for init to say the call's processes are all gone (without a pid namespace, for
    init to exit), killing the tree on `Kill`, if the host goes away, or at the call's CPU
    limit. Returns the `Done` to send and whether the host is gone."""
    poller = select.poll()
    for fd in (tree.pidfd, sock.fileno(), tree.up.fileno()):
        poller.register(fd, select.POLLIN)
    killed = gone = exited = heard = False
    ended: Exited | None = None
    limit = None
    while not (exited or (heard and tree.serves)):
        wait = None if limit is not None else _cpu_wait(tree)
        if wait == 0:
            tree.kill()
            limit, wait = "cpu", None
        ready = {fd for fd, _ in poller.poll(wait)}
        exited = tree.pidfd in ready
        if tree.up.fileno() in ready or (exited and not heard):
            got = receive(tree.up)
            poller.unregister(tree.up)
            heard = True
            ended = got[0] if got is not None and isinstance(got[0], Exited) else None
        if sock.fileno() in ready:
            got = receive(sock)
            for fd in [] if got is None else got[1]:
                os.close(fd)
            if got is None or isinstance(got[0], Kill):
                tree.kill()
                killed, gone = True, got is None
                poller.unregister(sock)
    clean = ended is not None and ended.wait_status == 0  # its result stands, if it wrote one
    if limit is None and not clean and tree.cgroup is not None and tree.cgroup.oom_killed():
        limit = "memory"
    if exited or not tree.serves:
        tree.reap()  # (without a pid namespace, what init left comes back here: swept)
    swept = exited and not tree.pid_namespace and _sweep()
    strays = swept or (ended is not None and ended.strays)
    wait_status = None if ended is None else ended.wait_status
    return Done(killed, strays, wait_status, limit), gone
