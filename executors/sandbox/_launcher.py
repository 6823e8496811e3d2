"""The launcher: a clean interpreter that forks the process trees its calls run in.

The host starts it (`python -I -c BOOT`) in its own session with a scrubbed environment, then
sends `Start`s over a unix socket. A cold sandbox uses a launcher for one call; a warm one keeps
it. A tree serves a launcher's calls in turn, one process per call:

    launcher ─ fork ─> init (pid 1 of a new pid namespace; new mount and net namespaces; the
                        │    calls' root built once)
                        └─ fork ─> a call's process (a mount namespace of its own copying the
                                   root, with a fresh tmpfs for its work dir and /dev/shm, an
                                   IPC namespace of its own; waits for its call, confines
                                   itself, runs it), then the next call's, ...

Init forks each call's process once the last call is answered and nothing of it is left
(whatever it left running killed and reaped, its own process too), so a warm call costs a
hand-over to a process already made: no fork, no namespace, no root to build, no process to
tear down before the answer. Nothing in a tree runs tool code before the call's process has
confined itself for its call, and nothing of a call runs after its answer. A tree whose call
ended otherwise than cleanly (killed, at a limit, a crash, processes left running) is
discarded and a new one made. The launcher never reads a call (it
passes the memfd holding it on to the call's process): every process it or init forks comes
from a state that never held another call's arguments.

Each tree joins a cgroup of its own, made with it: the launcher reads a call's CPU time from it
while the call runs, and kills the tree at the call's CPU limit.

When a call's process exits, init kills and reaps the rest of the namespace, then tells the
launcher how the call ended; the launcher answers `Done` only then, never while a process of
the call can still run. A call's process that ended well closes its descriptors and stops
itself (SIGSTOP) in place of exiting: a stopped process runs no code and has no system call
half done, so once init has seen it stop and found no other process in the namespace (its
/proc, looked at once it has killed it: a timer of the call's could send it SIGCONT, and with
SIGKILL pending it runs, and forks, nothing again), the call is answered. Its exit, which tears
down its copy of init's memory (about a millisecond), goes on beside the answer, and ends
before the next call's process is made. `Kill` from the
host SIGKILLs init (the kernel kills the whole namespace).
Without pid namespaces init is a child subreaper instead: what a call leaves running comes back
to it, and it finds and kills it all below itself through each thread's /proc `children` file
(a kernel without them: a tree serves one call, and the launcher, a subreaper too, sweeps up
after it before `Done`).

Not root, a launcher makes its calls' namespaces in a user namespace of its own (mapping only
its own uid), made before its first tree: it forks once into it, the fork serving as the
launcher (pid 1 of a pid namespace of its own, so that it can come back to it after making each
tree's) while the first process waits for it to end.
"""

from __future__ import annotations

__all__ = ["main"]

import errno
import gc
import importlib
import os
import resource
import signal
import socket

from . import _child as child
from . import _seccomp as seccomp
from ._cgroup import Cgroup
from ._disk import call_mounts
from ._layers import Layer
from ._linux import (
    CHILDREN,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    below,
    enter_user_namespace,
    hold_namespaces,
    keep_only,
    kill_below,
    kill_the_rest,
    limit_malloc_arenas,
    others_alive,
    private_mounts,
    set_child_subreaper,
    set_parent_death_signal,
    setns,
    still_running,
    unshare,
    wait_for,
)
from ._tree import MadeTree, supervise
from ._view import reveal
from ._wire import Done, Exited, Prepare, Start, Tree, frame, receive, send

_NAMESPACES = ("pid_namespace", "mount_namespace", "network_namespace", "ipc_namespace")
_no_user_namespace = ""
"""Why this launcher, not root, could not make a user namespace (if it tried and failed)."""


def _failed(e: OSError) -> Layer:
    needs = ""
    if e.errno == errno.EPERM:
        needs = " (needs root, or CAP_SYS_ADMIN)"
        if _no_user_namespace:
            needs = f" (needs root, or a user namespace: {_no_user_namespace})"
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


def _init(
    kind: Tree,
    layers: dict[str, Layer],
    cgroup: Cgroup | None,
    up: int,
    down: int,
    ahead: bool,
    serving: bool,
) -> None:
    """A tree's init: join its cgroup, finish the namespaces (building the calls' root), then
    serve the launcher's calls in turn: fork each call's process (which makes its own mounts
    and waits on `down` for its call), wait for it, kill whatever else it left running, and
    tell the launcher on `up` how it ended. It is `serving` calls in turn as pid 1 of a pid
    namespace (whose /proc shows what a call left), or else as a child subreaper that finds
    them below it (`below`); one call only if neither. Its exit makes the kernel kill the rest
    of a pid namespace."""
    set_parent_death_signal(signal.SIGKILL)
    pid_one = os.getpid() == 1
    if serving and not pid_one:
        set_child_subreaper()  # what a call leaves comes back to it, to be found and killed
    if cgroup is not None:
        try:
            cgroup.join()
        except OSError as e:
            layers["cgroup"] = _failed(e)
    covers: dict[str, int] = {}
    own_inodes = "private_locks" in kind.layers
    if own_inodes:
        layers["private_locks"] = Layer(False, "needs mount_namespace")
    if "mount_namespace" in kind.layers:
        try:
            if not layers.get("pid_namespace", Layer(False, "")).in_force:
                raise OSError("needs pid_namespace")
            unshare(CLONE_NEWNS)
            private_mounts()
            covers, locks = reveal(kind.needed, own_inodes)
            if locks is not None:
                layers["private_locks"] = locks
            detail = "private /proc: only the call's processes"
            if covers:
                detail += f"; {', '.join(covers)} hidden but for the paths the call needs"
            layers["mount_namespace"] = Layer(True, detail)
        except OSError as e:
            layers["mount_namespace"] = _failed(e)
    if "network_namespace" in kind.layers:
        try:
            unshare(CLONE_NEWNET)
            layers["network_namespace"] = Layer(True, "no interface but a loopback that is down")
        except OSError as e:
            layers["network_namespace"] = _failed(e)
    launcher = socket.socket(fileno=up)
    frame(Exited(0, False))  # a first run, so that the one after the call is quicker
    stops = serving and ("/" in covers or not pid_one)  # it can tell what a call left
    held: list[int] = []
    while True:
        gc.freeze()
        made, tell = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (up, made, *held):
                os.close(fd)
            mine = dict(layers)
            workdir = call_mounts(kind, mine, _failed)
            down_sock = socket.socket(fileno=down)
            child.serve(down_sock, mine, covers, workdir, kind, ahead, tell, stops)
        os.close(tell)
        for fd in held:
            os.close(fd)  # the last call's namespaces go now, off its answer's way
        held = hold_namespaces(pid, made)
        wait_status = wait_for(pid, stops)
        sweep = kill_the_rest if pid_one else kill_below
        stopped = os.WIFSTOPPED(wait_status)  # it ended well, and stopped itself
        if stopped:  # killed first: a timer of its could wake it to fork while init looks
            os.kill(pid, signal.SIGKILL)  # (a fork under way either ends before, or fails)
            others = others_alive(pid) if pid_one else [p for p in below(os.getpid()) if p != pid]
            ended = Exited(0, bool(others) and sweep())
        else:
            ended = Exited(wait_status, sweep() if serving else still_running())
        send(launcher, ended)
        if not serving or not launcher.recv(1):  # the launcher has answered the call
            os._exit(0)
        if stopped and not ended.strays:  # its exit went on beside the answer: it ends before
            wait_for(pid)  # the next call's process is made (a lock it held through a mapping)
        ahead = True


def _make(kind: Tree, own: dict[str, Layer], own_pid_namespace: int, ahead: bool) -> MadeTree:
    """Fork a call's init (into a new pid namespace if wanted), which closes every descriptor
    of the launcher's; a tree made `ahead` of its call readies itself while it waits."""
    seccomp.adopt(kind.limits.network, kind.filters)  # trees inherit them
    layers = dict(own)
    cgroup = None
    if "cgroup" in kind.layers:
        try:
            if isinstance(kind.cgroups, str):
                raise OSError(kind.cgroups)
            cgroup = Cgroup(kind.cgroups, kind.limits)
            layers["cgroup"] = Layer(True, cgroup.detail)
        except OSError as e:
            layers["cgroup"] = _failed(e)
    up, init_up = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    down, init_down = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    in_namespace = False
    if "pid_namespace" in kind.layers:
        try:
            unshare(CLONE_NEWPID)
            in_namespace = True
            layers["pid_namespace"] = Layer(True, "the call's processes die with it")
        except OSError as e:
            layers["pid_namespace"] = _failed(e)
    serves = in_namespace or CHILDREN  # init can find, and kill, what each call left
    gc.freeze()  # fewer copy-on-write faults in the children: the collector leaves these be
    pid = os.fork()
    if pid == 0:
        try:
            keep_only(init_up.fileno(), init_down.fileno())
            _init(kind, layers, cgroup, init_up.detach(), init_down.detach(), ahead, serves)
        finally:
            os._exit(70)
    if in_namespace:
        setns(own_pid_namespace, CLONE_NEWPID)
    init_up.close()
    init_down.close()
    return MadeTree(kind, in_namespace, serves, cgroup, pid, up, down)


class MadeTrees:
    """Makes the launcher's trees: one as a call comes or, once told to `prepare`, one ahead
    of its first call, kept while its calls end cleanly. Only a tree with a pid namespace is
    kept: after a call without one the launcher sweeps up every child it has, then makes the
    next tree."""

    def __init__(self) -> None:
        limit_malloc_arenas(2)  # once, here, for every call's processes
        self._own = _own_layers()
        self._own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._ahead: Tree | None = None
        self._ready: MadeTree | None = None
        self._in_user_namespace = False

    def _make(self, kind: Tree, ahead: bool) -> MadeTree:
        if os.geteuid() != 0 and any(name in kind.layers for name in _NAMESPACES):
            self._enter_user_namespace()
        return _make(kind, self._own, self._own_pid_namespace, ahead)

    def _enter_user_namespace(self) -> None:
        """Once, before the first tree that wants namespaces: fork into a user namespace of
        this launcher's own (with a mount and a pid namespace it owns). The fork goes on as
        the launcher; this process waits for it and exits as it does."""
        global _no_user_namespace
        if self._in_user_namespace or _no_user_namespace:
            return
        try:
            enter_user_namespace(CLONE_NEWNS | CLONE_NEWPID)
        except OSError as e:
            _no_user_namespace = e.strerror or str(e)
            if e.errno == errno.ENOSPC:
                _no_user_namespace += " (user.max_user_namespaces is 0 here)"
            return
        pid = os.fork()
        if pid != 0:
            os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        set_parent_death_signal(signal.SIGKILL)
        set_child_subreaper()  # pid 1 of its namespace anyway: orphans come here
        os.close(self._own_pid_namespace)
        self._own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._in_user_namespace = True

    def _refill(self) -> None:
        if self._ahead is not None and self._ready is None:
            self._ready = self._make(self._ahead, True)

    def prepare(self, message: Prepare) -> None:
        _load_core()
        self.discard()
        self._ahead = message.tree
        self._refill()

    def start(self, start: Start, fds: list[int]) -> MadeTree:
        """Hand the call to the ready tree if it was made for calls like it, else to a new
        one."""
        tree, self._ready = self._ready, None
        if tree is None or tree.kind != start.tree or not tree.hand(start, fds):
            if tree is not None:
                tree.discard()
            tree = self._make(start.tree, False)
            if not tree.hand(start, fds):
                raise OSError(f"the tool process of a tree just made is gone (init {tree.pid})")
        if tree.cgroup is not None:
            tree.cgroup.begin()
        return tree

    def after(self, tree: MadeTree, done: Done) -> None:
        """Once a call is done: keep its tree for the next call if it serves calls in turn
        and this one ended cleanly (its process exited with 0, leaving none running), else
        close it and make the next."""
        kept = self._ahead == tree.kind and self._ready is None and tree.serves
        kept = kept and tree.pidfd >= 0 and done == Done(False, False, 0) and tree.idle()
        if kept and (tree.cgroup is None or not tree.cgroup.oom_killed()):
            self._ready = tree
            return
        tree.discard()
        self._refill()

    def discard(self) -> None:
        if self._ready is not None:
            self._ready.discard()
            self._ready = None


def _load_core() -> None:
    """Import the whole `turnstile.core` (the launcher itself needs only a few of its modules):
    tools defined with `@tool` import it, and a warm launcher's trees should not each pay for
    that import in their call."""
    importlib.import_module("turnstile.core")


def main(sock_fd: int) -> None:
    """Serve calls from the host until it hangs up (or dies: the socket tells either way)."""
    sock = socket.socket(fileno=sock_fd)
    trees = MadeTrees()
    while (got := receive(sock)) is not None:
        message, fds = got
        if isinstance(message, Prepare):
            trees.prepare(message)
        if not isinstance(message, Start):
            for fd in fds:
                os.close(fd)
            continue
        tree = trees.start(message, fds)
        done, gone = supervise(sock, tree)
        if gone:
            tree.discard()
            break
        send(sock, done)
        tree.answered()
        trees.after(tree, done)
    trees.discard()
    os._exit(0)  # nothing to finalize; spares the host's wait
