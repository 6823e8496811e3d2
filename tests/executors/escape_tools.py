"""Tools that try to escape from inside a sandboxed call: the host's IPC objects, host files the
call has no need of, the host's unix sockets, address families it has no use for. Each reports what
it got ("ok", what it read, or the error), so a test tells a refusal from a success; the host-side
helpers make the objects they go for (or look for what a call left)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import sqlite3
import struct
import time

from turnstile.core import tool

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.mq_receive.restype = ctypes.c_ssize_t

IPC_CREAT = 0o1000
IPC_RMID = 0
MESSAGE_SIZE = 8192
"""Linux's default size of a POSIX queue's message: mq_receive needs a buffer this big."""


def failure() -> str:
    """The errno of the last ctypes call, by name."""
    return errno.errorcode.get(ctypes.get_errno(), "?")


def shm_create(key: int, text: bytes) -> int:
    """A SysV shared memory segment `key`, mode 0666, holding `text`; its id."""
    shm = libc.shmget(key, 4096, IPC_CREAT | 0o666)
    if shm < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    address = libc.shmat(shm, None, 0)
    ctypes.memmove(address, text, len(text))
    libc.shmdt(ctypes.c_void_p(address))
    return int(shm)


def shm_remove(shm: int) -> None:
    libc.shmctl(shm, IPC_RMID, None)


def shm_read(key: int) -> str:
    """What segment `key` holds, or why it cannot be attached."""
    shm = libc.shmget(key, 0, 0)
    if shm < 0:
        return failure()
    address = libc.shmat(shm, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return failure()
    try:
        return ctypes.string_at(address).decode(errors="replace")
    finally:
        libc.shmdt(ctypes.c_void_p(address))


def mq_send(name: str, text: str, create: bool) -> str:
    """Leave `text` in POSIX queue `name` (made with mode 0666 if `create`)."""
    flags = os.O_WRONLY | (os.O_CREAT if create else 0)
    queue = libc.mq_open(name.encode(), flags, 0o666, None)
    if queue < 0:
        return failure()
    try:
        data = text.encode()
        return "ok" if libc.mq_send(queue, data, len(data), 0) == 0 else failure()
    finally:
        libc.mq_close(queue)


def mq_take(name: str) -> str:
    """Take a message from POSIX queue `name`, or say why not."""
    queue = libc.mq_open(name.encode(), os.O_RDONLY | os.O_NONBLOCK, 0, None)
    if queue < 0:
        return failure()
    try:
        buffer = ctypes.create_string_buffer(MESSAGE_SIZE)
        got = libc.mq_receive(queue, buffer, MESSAGE_SIZE, None)
        return buffer.raw[:got].decode() if got >= 0 else failure()
    finally:
        libc.mq_close(queue)


@tool
def overwrites_shared_memory(key: int) -> str:
    """Read SysV shared memory segment `key`, then overwrite it."""
    found = shm_read(key)
    shm = libc.shmget(key, 0, 0)
    if shm >= 0:
        address = libc.shmat(shm, None, 0)
        ctypes.memmove(address, b"pwned\0", 6)
        libc.shmdt(ctypes.c_void_p(address))
    return found


@tool
def takes_message(name: str) -> str:
    """Take a message from POSIX message queue `name`."""
    return mq_take(name)


@tool
def leaves_message(name: str, text: str) -> str:
    """Create POSIX message queue `name` (mode 0666) and leave `text` in it for whoever
    comes next."""
    return mq_send(name, text, create=True)


def _attempt(action: object, *args: object) -> str:
    try:
        action(*args)  # type: ignore[operator]
        return "ok"
    except OSError as e:
        return type(e).__name__


@tool
def reads(paths: list[str]) -> dict[str, str]:
    """Read each of `paths`: its text, or the error's type."""
    found = {}
    for path in paths:
        try:
            with open(path) as f:
                found[path] = f.read()
        except OSError as e:
            found[path] = type(e).__name__
    return found


@tool
def touches(path: str, lock: str) -> dict[str, str]:
    """Set the times of `path` to now and a user xattr on it; take an exclusive lock on `lock`,
    opened read-only."""

    def locks() -> None:
        with open(lock) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)

    return {
        "utime": _attempt(os.utime, path),
        "setxattr": _attempt(os.setxattr, path, "user.turnstile", b"pwned"),
        "flock": _attempt(locks),
    }


def _flock(kind: int) -> bytes:
    """A `struct flock` for the whole file (Linux's layout: type, whence, start, len, pid)."""
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 0, 0)


_LOCKS = {
    "flock": lambda fd: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
    "lockf": lambda fd: fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
    "F_SETLK": lambda fd: fcntl.fcntl(fd, fcntl.F_SETLK, _flock(fcntl.F_RDLCK)),
    "F_OFD_SETLK": lambda fd: fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(fcntl.F_RDLCK)),
    "F_SETLEASE": lambda fd: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK),
}
"""Each kind of lock a process can take on a file it may only read."""


def _errno(action: object, *args: object) -> str:
    try:
        action(*args)  # type: ignore[operator]
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, type(e).__name__)


@tool
def holds_locks(paths: list[str], meeting: str) -> dict[str, dict[str, str]]:
    """Take every kind of lock on each of `paths` (read-only: the most a call can open them),
    each through a descriptor of its own, and hold them until the host has looked: a file
    "ready" in the directory `meeting` says they are held, the host's "looked" that it is done.
    What each lock got: "ok" or the errno's name."""
    taken: dict[str, dict[str, str]] = {}
    fds = []
    for path in paths:
        taken[path] = {}
        for kind, lock in _LOCKS.items():
            fds.append(os.open(path, os.O_RDONLY))
            taken[path][kind] = _errno(lock, fds[-1])
    with open(os.path.join(meeting, "ready"), "w") as f:
        f.write("held")
    deadline = time.monotonic() + 20
    while not os.path.exists(os.path.join(meeting, "looked")) and time.monotonic() < deadline:
        time.sleep(0.01)
    for fd in fds:
        os.close(fd)
    return taken


def locks_seen(path: str) -> list[str]:
    """What of other processes' locks the host sees on `path`: an exclusive flock it cannot
    take, a POSIX or OFD lock that would conflict with its writing, and any line of
    /proc/locks (leases too) on the file's inode."""
    seen = []
    fd = os.open(path, os.O_RDONLY)
    try:
        if _errno(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB) != "ok":
            seen.append("flock")
        fcntl.flock(fd, fcntl.LOCK_UN)
        for name in ("F_GETLK", "F_OFD_GETLK"):
            found = fcntl.fcntl(fd, getattr(fcntl, name), _flock(fcntl.F_WRLCK))
            if struct.unpack("hhqqi4x", found)[0] != fcntl.F_UNLCK:
                seen.append(name)
    finally:
        os.close(fd)
    info = os.stat(path)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    with open("/proc/locks") as f:
        seen += [line.strip() for line in f if line.split()[5:6] == [inode]]
    return seen


@tool
def keeps_sqlite() -> list[object]:
    """Use a SQLite database in the work dir as an app would (WAL, two connections): its rows,
    and what the second connection got while the first held an exclusive lock."""
    first = sqlite3.connect("notes.db", isolation_level=None)
    second = sqlite3.connect("notes.db", timeout=0, isolation_level=None)
    try:
        first.execute("PRAGMA journal_mode=wal")
        first.execute("CREATE TABLE notes (text TEXT)")
        first.execute("INSERT INTO notes VALUES ('kept')")
        first.execute("BEGIN EXCLUSIVE")
        try:
            second.execute("BEGIN EXCLUSIVE")
            refused = "not locked"
        except sqlite3.OperationalError as e:
            refused = str(e)
        first.execute("COMMIT")
        second.execute("INSERT INTO notes VALUES ('too')")
        return [[row[0] for row in first.execute("SELECT text FROM notes")], refused]
    finally:
        first.close()
        second.close()


@tool
def connects_unix(path: str) -> str:
    """Connect to the unix socket at `path` and say hello."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"hello")
    return "connected"


_KINDS = {
    "AF_UNIX": socket.SOCK_STREAM,
    "AF_INET": socket.SOCK_STREAM,
    "AF_INET6": socket.SOCK_STREAM,
    "AF_VSOCK": socket.SOCK_STREAM,
    "AF_NETLINK": socket.SOCK_RAW,
    "AF_PACKET": socket.SOCK_DGRAM,
    "AF_ALG": socket.SOCK_SEQPACKET,
}


@tool
def opens_sockets(families: list[str]) -> dict[str, str]:
    """Open a socket of each address family named (e.g. "AF_VSOCK"), and bind and listen
    where it is a stream: "ok", or the errno's name."""
    found = {}
    for name in families:
        try:
            with socket.socket(getattr(socket, name), _KINDS[name]) as s:
                if name == "AF_VSOCK":
                    s.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
                    s.listen()
            found[name] = "ok"
        except OSError as e:
            found[name] = errno.errorcode.get(e.errno or 0, type(e).__name__)
    return found
