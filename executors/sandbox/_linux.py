"""The few Linux calls Python 3.11's `os` lacks (unshare, setns, mount, pivot_root, prctl),
through ctypes; and the sandbox's ways with its child processes (waiting, sweeping).

Each raises `OSError` with the kernel's errno, so a caller can report exactly why a layer of
the sandbox is missing on this machine.
"""

from __future__ import annotations

__all__ = [
    "CHILDREN",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "attach",
    "below",
    "bind",
    "children",
    "clone_mount",
    "clone_tree",
    "detach",
    "drop_capabilities",
    "enter_user_namespace",
    "hold_namespaces",
    "install_seccomp_filter",
    "keep_only",
    "kill_below",
    "kill_the_rest",
    "libc",
    "limit_malloc_arenas",
    "mount_mqueue",
    "mount_overlay",
    "mount_proc",
    "mount_tmpfs",
    "no_new_privs",
    "others_alive",
    "pivot_root_here",
    "private_mounts",
    "read_only",
    "set_child_subreaper",
    "set_parent_death_signal",
    "setns",
    "still_running",
    "unshare",
    "wait_for",
    "write_file",
]

import contextlib
import ctypes
import errno
import os
import resource
import signal

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MNT_DETACH = 2

_OPEN_TREE = 428  # these three have the same number on every architecture
_MOVE_MOUNT = 429
_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = 0o2000000
_MOVE_MOUNT_F_EMPTY_PATH = 4
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41}

_PR_SET_PDEATHSIG = 1
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91, "loongarch64": 91}
_M_ARENA_MAX = -8

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> None:
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    _check(libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def _prctl(option: int, value: int, what: str) -> None:
    args = (ctypes.c_ulong(0),) * 3
    _check(libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), *args), what)


def set_parent_death_signal(signum: int) -> None:
    """Have the kernel send `signum` to this process when the thread that forked it exits."""
    _prctl(_PR_SET_PDEATHSIG, signum, "prctl(PR_SET_PDEATHSIG)")


def set_child_subreaper() -> None:
    """Orphans below this process are re-parented to it instead of to init, so none escape."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1, "prctl(PR_SET_CHILD_SUBREAPER)")


def no_new_privs() -> None:
    """No exec may gain privileges again (setuid bits, file caps); Landlock needs it."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS)")


def write_file(path: str, text: str) -> None:
    """Write `text` to the existing file `path` in one write (a /proc or cgroup file)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_user_namespace(flags: int) -> None:
    """Move into a new user namespace (and the namespaces `flags` names besides, owned by it),
    mapping only this process's own uid and gid: an unprivileged process gets the
    capabilities to make namespaces and mounts there, and no more rights on any file."""
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | flags)
    write_file("/proc/self/uid_map", f"{uid} {uid} 1")
    write_file("/proc/self/setgroups", "deny")
    write_file("/proc/self/gid_map", f"{gid} {gid} 1")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]


def drop_capabilities() -> None:
    """Give up every capability (a user namespace's creator holds them all there), ambient
    ones too, for good: with no_new_privs no exec gains any back."""
    number = _CAPSET.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"capset: unknown on {os.uname().machine}")
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "prctl(PR_CAP_AMBIENT)")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.syscall(ctypes.c_long(number), ctypes.byref(header), data), "capset")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp_filter(program: bytes, *, no_new_privs_first: bool = True) -> None:
    """Install a seccomp BPF `program` (8-byte instructions) on this thread, setting
    no_new_privs first as `seccomp_load` does (unless told not to: the kernel then wants
    CAP_SYS_ADMIN); like it, without flags."""
    if no_new_privs_first:
        no_new_privs()
    code = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(code, ctypes.c_void_p))
    _check(
        libc.prctl(
            ctypes.c_int(_PR_SET_SECCOMP),
            ctypes.c_ulong(_SECCOMP_MODE_FILTER),
            ctypes.byref(fprog),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        "prctl(PR_SET_SECCOMP)",
    )


def bind(source: str, target: str) -> None:
    """Bind `source` (with the mounts below it) onto `target`."""
    flags = ctypes.c_ulong(_MS_BIND | _MS_REC)
    _check(libc.mount(source.encode(), target.encode(), None, flags, None), f"bind {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]


def _set_attributes(fd: int, path: str, flags: int, attributes: int) -> None:
    """mount_setattr: set `attributes` on the mount at `path` (from `fd`) and those below it."""
    attr = _MountAttr(attributes, 0, 0, 0)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    every = ctypes.c_uint(flags | _AT_RECURSIVE)
    result = libc.syscall(_MOUNT_SETATTR, fd, path.encode(), every, ctypes.byref(attr), size)
    _check(result, f"mount_setattr {path}")


def read_only(target: str) -> None:
    """Make the mount at `target` and those below it read-only, nosuid and nodev."""
    attributes = _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
    _set_attributes(_AT_FDCWD, target, 0, attributes)


def mount_tmpfs(target: str, options: str = "mode=0755,size=1m") -> None:
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    _check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", flags, options.encode()), "tmpfs")


def mount_mqueue(target: str) -> None:
    """Show the POSIX message queues of the current IPC namespace at `target`."""
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _check(libc.mount(b"mqueue", target.encode(), b"mqueue", flags, None), "mount mqueue")


def pivot_root_here() -> None:
    """Make the current directory (a mount point) the root of this mount namespace for every
    process in it, and detach the old root, so that nothing of it is reachable any more."""
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown on {os.uname().machine}")
    _check(libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    detach(".")
    os.chdir("/")


def detach(target: str) -> None:
    """Unmount the mounts at `target` (and below) once nothing uses them; mounts made from
    them (binds, overlays) stay."""
    _check(libc.umount2(os.fsencode(target), ctypes.c_int(_MNT_DETACH)), f"umount {target}")


def _escaped(path: str) -> str:
    """`path` as overlayfs's options take it: its separators, commas and backslashes escaped."""
    return path.replace("\\", "\\\\").replace(":", "\\:").replace(",", "\\,")


def mount_overlay(lower: tuple[str, ...], target: str, *, devices: bool = False) -> None:
    """Mount a read-only overlay of the directories `lower` (the topmost first; at least two)
    on `target`: their files through inodes of its own. nosuid, and nodev unless `devices`."""
    flags = ctypes.c_ulong(_MS_RDONLY | _MS_NOSUID | (0 if devices else _MS_NODEV))
    options = os.fsencode("lowerdir=" + ":".join(_escaped(path) for path in lower))
    target_b = os.fsencode(target)
    _check(libc.mount(b"overlay", target_b, b"overlay", flags, options), f"overlay {target}")


def clone_mount(source: str) -> int:
    """A detached copy of the mount at `source`, for `attach`."""
    flags = ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)
    tree = libc.syscall(_OPEN_TREE, _AT_FDCWD, source.encode(), flags)
    _check(tree, f"open_tree {source}")
    return int(tree)


def clone_tree(namespace: int, own: int, source: str) -> int:
    """A detached copy of the mounts at `source` as mount namespace `namespace` sees it, for
    `attach`; the current process then goes back to its `own` (both are descriptors)."""
    setns(namespace, CLONE_NEWNS)
    try:
        return clone_mount(source)
    finally:
        setns(own, CLONE_NEWNS)


def attach(tree: int, target: str) -> None:
    """Mount `tree` (from `clone_tree`) on `target`, nosuid and nodev."""
    _set_attributes(tree, "", _AT_EMPTY_PATH, _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV)
    flags = ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)
    _check(libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, target.encode(), flags), "move_mount")


def private_mounts() -> None:
    """In a fresh mount namespace: stop mount events propagating to or from the host."""
    _check(libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None), "mount")


def mount_proc(target: str) -> None:
    """Mount at `target` a /proc that shows the current pid namespace only (the call's own
    processes)."""
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _check(libc.mount(b"proc", target.encode(), b"proc", flags, None), "mount /proc")


def limit_malloc_arenas(count: int) -> None:
    """Few malloc arenas, so a threaded tool does not spend its address-space limit on the
    64 MiB each extra arena reserves."""
    libc.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(count))


def _state(pid: str) -> tuple[int, bytes] | None:
    """The parent of process `pid` and its state letter, from /proc (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0]


def _alive(pid: str, state: bytes) -> bool:
    """Whether process `pid`, in `state`, has a thread left: /proc shows a process whose first
    thread ended alone (the exit system call, not exit_group) as a zombie while the others run."""
    if state != b"Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def children() -> list[int]:
    """The pids of this process's children, read from /proc (the `children` file is optional)."""
    me = os.getpid()
    found = ((entry, _state(entry)) for entry in os.listdir("/proc") if entry.isdigit())
    return [int(entry) for entry, state in found if state is not None and state[0] == me]


def below(pid: int) -> list[int]:
    """The live processes below `pid` (its children, theirs, ...), read from each thread's
    /proc `children` file (`CHILDREN` says whether this kernel has them)."""
    found: list[int] = []
    left = [pid]
    while left:
        parent = left.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for kid in kids:
                state = _state(str(kid))
                if state is not None and _alive(str(kid), state[1]):
                    found.append(kid)
                left.append(kid)
    return found


CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
"""Whether this kernel shows each thread's children (CONFIG_PROC_CHILDREN)."""


def kill_below() -> bool:
    """As a child subreaper (no pid namespace of its own: `kill(-1)` would reach the host's
    processes): kill and reap every process below this one; True if any was still running."""
    found = False
    while pids := below(os.getpid()):
        found = True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, 0)  # killed, each ends: a child of this one, or an orphan come back
        still_running()
    return found


def others_alive(pid: int) -> bool:
    """As pid 1 of a pid namespace whose /proc it sees: whether any process but itself and
    `pid` is alive in it (a zombie is not, unless a thread of it is: `_alive`)."""
    ours = ("1", str(pid))
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry not in ours:
            state = _state(entry)
            if state is not None and _alive(entry, state[1]):
                return True
    return False


def still_running() -> bool:
    """Reap exited children; True if any child is still running."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def keep_only(*fds: int) -> None:
    """Close every inherited descriptor above stderr but `fds`."""
    low = 3
    for fd in sorted(fds):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def wait_for(pid: int, stops: bool = False) -> int:
    """Wait for child `pid` to exit, or if `stops` to stop itself with SIGSTOP (reaping any
    other child that ends first); its wait status."""
    flags = os.WUNTRACED if stops else 0
    while True:
        reaped, wait_status = os.waitpid(-1, flags)
        stopped = os.WIFSTOPPED(wait_status)
        if reaped == pid and (not stopped or os.WSTOPSIG(wait_status) == signal.SIGSTOP):
            return wait_status


def kill_the_rest() -> bool:
    """As pid 1 of a call's pid namespace: kill and reap every other process in it (a call's
    strays); True if any was still running."""
    found = False
    while still_running():
        found = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but this one
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, 0)
    return found


def hold_namespaces(pid: int, made: int) -> list[int]:
    """Once the call's process `pid` says on `made` that it has made its namespaces, hold
    them: their teardown (unmounting a mount namespace waits for RCU) is then init's to do
    after the call's answer, not the call's own exit's, on its way."""
    try:
        if not os.read(made, 1):
            return []
        return [
            os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC) for ns in ("mnt", "ipc")
        ]
    except OSError:
        return []
    finally:
        os.close(made)
