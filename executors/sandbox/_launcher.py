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

Init forks each call's process once the last call is answered and nothing of it can run any
more (whatever it left running killed and reaped, its own process killed: that one's exit goes
on beside the fork), so a warm call costs a hand-over to a process already made: no fork, no
namespace, no root to build, no process to tear down before the answer. Nothing in a tree runs
tool code before the call's process has confined itself for its call, and nothing of a call
runs after its answer. A tree whose call ended otherwise than cleanly (killed, at a limit, a crash,
processes left running) is discarded and a new one made. The launcher never reads a call (it
passes the memfd holding it on to the call's process): every process it or init forks comes
from a state that never held another call's arguments.

Each tree joins a cgroup of its own, made with it: the launcher reads a call's CPU time from it
while the call runs, and kills the tree at the call's CPU limit.

When a call's process exits, init kills and reaps the rest of the namespace, then tells the
launcher how the call ended; the launcher answers `Done` only then, never while a process of
the call can still run. A call's process that ended well closes its descriptors and stops
itself (SIGSTOP) in place of exiting: a stopped process runs no code and has no system call
half done, so once init has seen it stop and found no other process in the namespace (its
/proc), the call is answered, and the process is killed after. Its exit, which tears down its
copy of init's memory (about a millisecond), is then off the answer's way. `Kill` from the
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

import contextlib
import errno
import gc
import importlib
import os
import resource
import select
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
    children,
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
from ._view import reveal
from ._wire import Done, Exited, Kill, Prepare, Start, Tree, frame, receive, send

_CPUS = len(os.sched_getaffinity(0))
_LOOK_S = 0.01
"""The shortest wait between two looks at a call's CPU time: it may overrun its limit by as
much CPU time as its processes use in that while."""


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
    dying = 0  # the last call's process, killed but maybe not yet reaped
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
        wait_status = wait_for(pid, stops, dying)
        sweep = kill_the_rest if pid_one else kill_below
        if os.WIFSTOPPED(wait_status):  # it ended well, and stopped: it can do nothing more
            others = others_alive(pid) if pid_one else below(os.getpid()) != [pid]
            ended = Exited(0, others and sweep())
        else:
            ended = Exited(wait_status, sweep() if serving else still_running())
        send(launcher, ended)
        if not serving or not launcher.recv(1):  # the launcher has answered the call
            os._exit(0)
        dying = 0
        if os.WIFSTOPPED(wait_status) and not ended.strays:  # the only one left: it dies
            os.kill(pid, signal.SIGKILL)  # beside the next call's process being made
            dying = pid
        ahead = True


class _Tree:
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
        """Reap the tree, then remove its cgroup (after the call's `Done`: off its path)."""
        self.reap()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    def discard(self) -> None:
        """Kill and close a tree."""
        self.kill()
        self.close()


def _make(kind: Tree, own: dict[str, Layer], own_pid_namespace: int, ahead: bool) -> _Tree:
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
    return _Tree(kind, in_namespace, serves, cgroup, pid, up, down)


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


def _cpu_wait(tree: _Tree) -> float | None:
    """Milliseconds until the call could first reach its CPU limit (its processes use at most
    every CPU at once): 0 once it has, None if it has no cgroup to tell."""
    if tree.cgroup is None:
        return None
    left = tree.kind.limits.cpu_s - tree.cgroup.cpu_s()
    return 0 if left <= 0 else max(left / _CPUS, _LOOK_S) * 1000


def _supervise(sock: socket.socket, tree: _Tree) -> tuple[Done, bool]:
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


class _Trees:
    """Makes the launcher's trees: one as a call comes or, once told to `prepare`, one ahead
    of its first call, kept while its calls end cleanly. Only a tree with a pid namespace is
    kept: after a call without one the launcher sweeps up every child it has, then makes the
    next tree."""

    def __init__(self) -> None:
        limit_malloc_arenas(2)  # once, here, for every call's processes
        self._own = _own_layers()
        self._own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self._ahead: Tree | None = None
        self._ready: _Tree | None = None
        self._in_user_namespace = False

    def _make(self, kind: Tree, ahead: bool) -> _Tree:
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

    def start(self, start: Start, fds: list[int]) -> _Tree:
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

    def after(self, tree: _Tree, done: Done) -> None:
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
    trees = _Trees()
    while (got := receive(sock)) is not None:
        message, fds = got
        if isinstance(message, Prepare):
            trees.prepare(message)
        if not isinstance(message, Start):
            for fd in fds:
                os.close(fd)
            continue
        tree = trees.start(message, fds)
        done, gone = _supervise(sock, tree)
        if gone:
            tree.discard()
            break
        send(sock, done)
        tree.answered()
        trees.after(tree, done)
    trees.discard()
    os._exit(0)  # nothing to finalize; spares the host's wait
