"""Tools for the sandbox's tests: a few well-behaved ones, and many that misbehave or try to
escape. The sandbox imports them by path in its confined processes."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from turnstile.core import ToolContext, tool

SESSION = f"/nonexistent/turnstile-sandbox-tests-{os.getpid()}"
"""A path put on `sys.path` when this module loads: sandboxes copy `sys.path` into their
launchers' command lines, so `leftovers` can tell this test session's processes from those of
any other session running on the machine."""
if SESSION not in sys.path:
    sys.path.append(SESSION)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def my_call_id(context: ToolContext) -> str:
    """The id of this call, as the runner gave it."""
    return context.call_id


def plain_add(a: int, b: int) -> int:
    """Add two integers (a plain function, for tools given by path)."""
    return a + b


@tool
async def async_add(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    await asyncio.sleep(0)
    return a + b


@tool
def modules_before_me() -> list[str]:
    """The modules the call's process had loaded before it imported this one (and its package:
    a module is put last in `sys.modules` only once all its own imports are done)."""
    names = list(sys.modules)
    return names[: names.index(str(__package__))]


@tool
def nap(seconds: float) -> list[float]:
    """Sleep, and say when the nap started and ended (system-wide monotonic clock)."""
    start = time.monotonic()
    time.sleep(seconds)
    return [start, time.monotonic()]


@tool
def where_am_i() -> dict[str, object]:
    """The call's cwd, its environment and whether it can write a file there."""
    with open("note.txt", "w") as f:
        f.write("hello")
    return {"cwd": os.getcwd(), "env": dict(os.environ), "files": os.listdir(".")}


@tool
def write_file(path: str, size: int) -> str:
    """Write `size` bytes to `path`."""
    with open(path, "wb") as f:
        f.write(b"x" * size)
    return f"wrote {size} bytes to {path}"


@tool
def raises() -> str:
    """Raise an exception."""
    raise ValueError("no luck")


@tool
def exits(code: int) -> str:
    """Exit the process with `code`."""
    sys.exit(code)


@tool
def aborts() -> str:
    """Abort the process (SIGABRT)."""
    os.abort()


@tool
def segfaults() -> str:
    """Read address 0 (SIGSEGV)."""
    return ctypes.string_at(0).decode()


@tool
def hangs() -> str:
    """Sleep for good."""
    time.sleep(1000)
    return "woke up"


@tool(timeout_s=0.5)
def hangs_briefly() -> str:
    """Sleep for good, but with a tool timeout of its own."""
    time.sleep(1000)
    return "woke up"


@tool
def spins() -> str:
    """Burn CPU for good."""
    while True:
        pass


@tool
def floods(megabytes: int) -> str:
    """Write `megabytes` MB to stdout."""
    chunk = "x" * 1_000_000
    for _ in range(megabytes):
        sys.stdout.write(chunk)
    return "flooded"


@tool
def returns_big(megabytes: int) -> str:
    """Return a string of `megabytes` MB."""
    return "x" * (megabytes * 1_000_000)


@tool
def allocates(gigabytes: int) -> int:
    """Allocate `gigabytes` GiB."""
    return len(bytearray(gigabytes << 30))


@tool
def fork_bomb(seconds: float) -> str:
    """Fork for `seconds`, every child forking too; children never stop."""
    me = os.getpid()
    refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end or os.getpid() != me:
        try:
            os.fork()
        except OSError:
            refused += 1
    return f"forks refused: {refused}"


@tool
def leaves_background_sleep(marker: str) -> str:
    """Start `sleep 1000` (named `marker`) in the background and return."""
    subprocess.Popen([marker, "1000"], executable="/bin/sleep")
    return "started"


@tool
def leaves_thread_writing(path: str) -> str:
    """Start a thread that appends a line to `path` every millisecond, and return."""

    def write() -> None:
        while True:
            with open(path, "a") as f:
                f.write("still here\n")
            time.sleep(0.001)

    threading.Thread(target=write, daemon=True).start()
    time.sleep(0.01)
    return "started"


_SYS_EXIT = {"x86_64": 60, "aarch64": 93}


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Sigevent(ctypes.Structure):
    _fields_ = [
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),  # SIGEV_SIGNAL: 0
        ("rest", ctypes.c_int * 12),
    ]


@tool
def wakes_itself_to_linger(path: str) -> str:
    """Arm a timer that sends this process SIGCONT every half millisecond (handled: a timer of
    an ignored signal is parked), and make its exit (`os._exit`, as the sandbox calls it) fork
    a process that appends to `path` forever, and append to it too."""
    signal.signal(signal.SIGCONT, lambda *_: None)
    libc = ctypes.CDLL(None, use_errno=True)
    timer = ctypes.c_void_p()
    event = _Sigevent(None, signal.SIGCONT, 0)
    if libc.timer_create(time.CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)):
        return f"no timer: errno {ctypes.get_errno()}"
    half_ms = _Timespec(0, 500_000)
    libc.timer_settime(timer, 0, ctypes.byref((_Timespec * 2)(half_ms, half_ms)), None)

    def linger(code: int) -> None:
        os.fork()
        with open(path, "a") as f:
            while True:
                f.write("still here\n")
                f.flush()
                time.sleep(0.0005)

    os._exit = linger  # type: ignore[assignment]
    return "armed"


@tool
def leaves_a_headless_process(path: str) -> str:
    """Fork a process whose first thread ends alone (the exit system call, not exit_group), so
    that /proc shows it as a zombie while its other thread goes on appending to `path`."""
    if os.fork() == 0:
        threading.Thread(target=leaves_thread_writing.fn, args=(path,)).start()
        time.sleep(0.02)
        ctypes.CDLL(None, use_errno=True).syscall(_SYS_EXIT[os.uname().machine], 0)
    time.sleep(0.05)
    return "started"


@tool
def escapes(marker: str) -> str:
    """Double-fork a `sleep 1000` (named `marker`) into a session of its own, and return."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", [marker, "1000"])
        os._exit(0)
    os.waitpid(pid, 0)
    return "escaped"


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError as e:
        return f"{type(e).__name__}: {e}"


@tool
def steals_secrets(host_pid: int) -> str:
    """Collect every environment it can read: its own, its parent's, init's, the host's, and
    those of all processes in /proc."""
    found = {
        "os.environ": json.dumps(dict(os.environ)),
        "/proc/self/environ": _read("/proc/self/environ"),
        "/proc/<ppid>/environ": _read(f"/proc/{os.getppid()}/environ"),
        "/proc/1/environ": _read("/proc/1/environ"),
        "/proc/<host>/environ": _read(f"/proc/{host_pid}/environ"),
    }
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found[f"/proc/{entry}/environ"] = _read(f"/proc/{entry}/environ")
    return json.dumps(found)


@tool
def connects(port: int) -> str:
    """Connect to 127.0.0.1:`port` and say hello."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"hello")
    return "connected"


@tool
def signals_parents(host_pid: int) -> dict[str, str]:
    """Send SIGTERM then SIGKILL to its parent and to the host process."""
    attempts: dict[str, str] = {}
    for who, pid in (("parent", os.getppid()), ("host", host_pid)):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
                attempts[f"{who} {sig.name}"] = "sent"
            except OSError as e:
                attempts[f"{who} {sig.name}"] = type(e).__name__
    return attempts


def _processes() -> Iterator[tuple[str, bytes, str, str]]:
    """(pid, state, parent pid, command line) of every process but this one."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or entry == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
        except OSError:
            continue
        yield entry, state, ppid.decode(), command


def launchers() -> list[str]:
    """This session's launchers that are still running (a warm sandbox's idle ones)."""
    me = str(os.getpid())
    return [pid for pid, _, ppid, command in _processes() if ppid == me and SESSION in command]


def leftovers(marker: str = "") -> list[str]:
    """Processes a sandboxed call of this session may have left: anything named `marker`, any
    process running one of our launchers' command lines that is neither an idle launcher (a
    child of ours) nor a tree a warm launcher made ahead for its next call, and any zombie child
    of ours. Each as "pid state command". A call's process that ended well stops, and is
    killed just after its answer: one that can run no more is waited for, up to a second."""
    deadline = time.monotonic() + 1.0
    while (found := _left(marker)) and time.monotonic() < deadline:
        if any(running_threads(f.split()[0]) for f in found):
            break
        time.sleep(0.005)
    return found


_PF_EXITING = 0x4
_KILL = 1 << (signal.SIGKILL - 1)


def running_threads(pid: str) -> list[str]:
    """The threads of `pid` that may still run code of the call: neither ended (a zombie),
    stopped, killed (SIGKILL pending) nor exiting (tearing down)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines())
        except OSError:
            continue
        killed = (int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)) & _KILL
        if fields[0] not in (b"Z", b"T", b"X") and not (int(fields[6]) & _PF_EXITING or killed):
            found.append(tid)
    return found


def _left(marker: str) -> list[str]:
    found = []
    me = str(os.getpid())
    for pid, state, ppid, command in _processes():
        ours = ppid == me
        launched = SESSION in command and not ours and not _never_confined(pid)
        if (marker and marker in command) or launched or (ours and state == b"Z"):
            found.append(f"{pid} {state.decode()} {command[:80]}")
    return found


def _never_confined(pid: str) -> bool:
    """No tool code ever ran in this process: no_new_privs, which a call's process sets before
    running any, is inherited and never unset, and is still off."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nNoNewPrivs:\t0\n" in f.read()
    except OSError:
        return False


@tool
def how_turnstile_was_loaded() -> dict[str, str]:
    """Where the call's process got the core's and the sandbox's modules from, and whether it
    ran `site`."""
    import importlib

    core = importlib.import_module("turnstile.core._tools")
    child = sys.modules["turnstile.executors.sandbox._child"]
    return {
        "core": type(core.__spec__.loader).__name__,
        "child": getattr(child.__spec__.loader, "__name__", "?"),
        "file": str(core.__file__),
        "site": str("site" in sys.modules),
    }
