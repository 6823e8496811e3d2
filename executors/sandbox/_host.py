"""The host's side: start a launcher, hand it one call, and watch the call's pipes.

The call itself goes in a memfd the launcher passes on unread: a warm launcher forks every
later call's tree from a state that never held this one's arguments.

The host enforces what only it can see: the wall clock, the volume of stdout/stderr and the
size of the result. On any of them it sends `Kill`; should the launcher not answer, its whole
process group is killed and it is never used again.
"""

from __future__ import annotations

__all__ = ["Exchange", "Launcher", "exchange", "host_sys_path"]

import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from turnstile.core import ToolOutcome
from turnstile.core.messages import text_of

from ._cgroup import remove_leftovers
from ._image import image_fd
from ._limits import SandboxLimits
from ._verdict import (
    exit_message,
    forged_message,
    killed_message,
    limit_message,
    stray_message,
    too_large_message,
)
from ._wire import (
    Call,
    Done,
    Kill,
    Message,
    Prepare,
    Result,
    Start,
    Tree,
    decode_only,
    frame,
    receive,
    send,
    write_all,
)

# The launcher imports its modules and the core's from the image (see `_image`), before anything
# of the host's path. The packages' __init__s import the sync executor, the whole core (the loop
# and its `transitions` machine among it) and this host side; the launcher needs none of that,
# only a few modules of each (its modules import the core's submodules, never the package). It
# imports those under bare package objects, then drops these so that a tool importing
# `turnstile.core` still gets the real package, made of the same submodules.
_BOOT = """\
import marshal, os, sys
from importlib.machinery import ModuleSpec
from importlib.util import module_from_spec
sys.path[:] = sys.argv[3].split("\\n")
fd = int(sys.argv[2])
image = marshal.loads(os.pread(fd, os.fstat(fd).st_size, 0))
os.close(fd)
class Image:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in image:
            return None
        origin, package, _ = image[name]
        spec = ModuleSpec(name, cls, origin=origin, is_package=package)
        spec.has_location = True
        if package:
            spec.submodule_search_locations.append(os.path.dirname(origin))
        return spec
    def create_module(spec):
        return None
    def exec_module(module):
        exec(image[module.__name__][2], module.__dict__)
sys.meta_path.insert(0, Image)
if sys.flags.no_site:
    import builtins
    builtins.exit = builtins.quit = sys.exit
packages = ("turnstile.core", "turnstile.executors", "turnstile.executors.sandbox")
for name in packages:
    sys.modules[name] = module_from_spec(Image.find_spec(name))
from turnstile.executors.sandbox._launcher import main
for name in packages:
    del sys.modules[name]
main(int(sys.argv[1]))
"""
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
_GRACE_S = 5.0
_FRAMING = 64 * 1024
_TAIL = 4096


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Whether child `pid` exits within `timeout_s`, waking as it does (`Popen.wait` with a
    timeout polls, sleeping up to 50 ms between looks: a cold call would wait for that)."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # before Linux 5.3, or filtered out: poll after all
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.005)
        return False
    try:
        return bool(select.select([handle], [], [], timeout_s)[0])
    finally:
        os.close(handle)


_PLAIN_FINDERS = {"_frozen_importlib", "_frozen_importlib_external", "_distutils_hack"}
"""Modules of the import finders a plain interpreter has (and setuptools' shim for distutils)."""


def _site_hooks() -> bool:
    """Whether this interpreter imports through finders a plain one lacks (a `.pth` file's
    editable-install finder, say, which `site` installs): a launcher then runs `site` too.
    Otherwise it skips `site` (`-S`): it is given the host's `sys.path` whole, and `site` would
    only slow its start."""
    return any(
        getattr(finder, "__module__", type(finder).__module__) not in _PLAIN_FINDERS
        for finder in sys.meta_path
    )


def host_sys_path() -> tuple[str, ...]:
    """This interpreter's `sys.path` with the current directory made absolute."""
    return tuple(os.path.abspath(p) if p in ("", ".") else p for p in sys.path)


class Launcher:
    """A launcher process (see `_launcher`) and the socket to talk to it; told to
    `prepare`, it keeps each next call's process tree made ahead."""

    def __init__(self, sys_path: tuple[str, ...], prepare: Prepare | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        flags = ["-B"] if sys.dont_write_bytecode else []
        flags += [] if _site_hooks() else ["-S"]
        image = image_fd()
        argv = [sys.executable, "-I", *flags, "-c", _BOOT, str(theirs.fileno()), str(image)]
        try:
            self.process = subprocess.Popen(
                [*argv, "\n".join(sys_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), image),
                start_new_session=True,
                env=_ENV,
                cwd="/",
            )
        finally:
            theirs.close()
        self.sock = ours
        if prepare is not None:
            send(ours, prepare)

    def hang_up(self) -> None:
        """Tell the launcher to go (it discards its tree, then exits on its own); `close` waits
        for it."""
        self.sock.close()

    def close(self) -> None:
        """Hang up; the launcher exits on its own, or is killed after a grace period."""
        self.hang_up()
        if self.process.returncode is None and not _exits_within(self.process.pid, _GRACE_S):
            self.kill()
        self.process.wait()

    def kill(self) -> None:
        """Kill the launcher's whole process group, reap the launcher, and remove the cgroups
        it had no time to."""
        self.sock.close()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        remove_leftovers(self.process.pid)


@dataclass
class Exchange:
    """What came back from one call. `reason` is why the host stopped it ("timeout",
    "output", "result"), `done` is None if the launcher failed, `result` the one message the
    call wrote to its result pipe (None unless exactly one), `written` whether it wrote any,
    `output` the tail of what it wrote to stdout/stderr."""

    result: Message | None = None
    done: Done | None = None
    reason: str | None = None
    written: bool = False
    output: bytes = b""

    @property
    def healthy(self) -> bool:
        """Whether the launcher can take another call."""
        return self.done is not None

    def outcome(self, name: str, limits: SandboxLimits, wall_s: float) -> ToolOutcome:
        """What the model is told about the call. A result counts only if the call's process
        exited cleanly (status 0) having written exactly one: a frame written by hand, then a
        crash, or beside the real result, is no result of the call's."""
        if self.reason in ("timeout", "output"):
            return ToolOutcome(killed_message(name, self.reason, limits, wall_s), True)
        if self.reason == "result":
            return ToolOutcome(too_large_message(name, limits), True)
        if self.done is not None and self.done.limit is not None:
            return ToolOutcome(limit_message(name, self.done.limit, limits), True)
        status = None if self.done is None else self.done.wait_status
        if self.done is None or status is None:
            return ToolOutcome(f"the sandbox failed to run {name}", True)
        if status != 0 or not self.written:
            return ToolOutcome(exit_message(name, status, limits, self.output), True)
        if not isinstance(self.result, Result):
            return ToolOutcome(forged_message(name), True)
        if self.done.strays:
            return ToolOutcome(stray_message(name, text_of(self.result.content)), True)
        return ToolOutcome(self.result.content, self.result.is_error)


def _in_memfd(data: bytes) -> int:
    """A memfd holding `data`."""
    fd = os.memfd_create("turnstile-call", os.MFD_CLOEXEC)
    write_all(fd, data)
    return fd


def exchange(launcher: Launcher, tree: Tree, call: Call, wall_s: float) -> Exchange:
    """Run `call` on `launcher`, on a tree made for `tree`, and collect everything the call
    sent back."""
    call_fd = _in_memfd(frame(call))
    result_r, result_w = os.pipe()
    output_r, output_w = os.pipe()
    try:
        send(launcher.sock, Start(tree), (call_fd, result_w, output_w))
    finally:
        for fd in (call_fd, result_w, output_w):
            os.close(fd)
    try:
        return _watch(launcher, call, wall_s, result_r, output_r)
    finally:
        os.close(result_r)
        os.close(output_r)


def _watch(launcher: Launcher, call: Call, wall_s: float, result_r: int, output_r: int) -> Exchange:
    out = Exchange()
    result = bytearray()
    written = 0
    tail = bytearray()
    selector = selectors.DefaultSelector()
    for fd in (result_r, output_r, launcher.sock.fileno()):
        selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + wall_s

    def stop(reason: str) -> None:
        nonlocal deadline
        if out.reason is None and out.done is None:
            out.reason = reason
            deadline = time.monotonic() + _GRACE_S
            try:
                send(launcher.sock, Kill())
            except OSError:  # the launcher is gone: kill its group at once
                deadline = time.monotonic()

    with selector:
        while len(selector.get_map()) > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if out.done is None and out.reason is None:
                    stop("timeout")
                    continue
                if out.done is None:  # the launcher did not answer `Kill`
                    launcher.kill()
                break  # or a pipe outlived the call's processes (passed on to some other)
            for key, _ in selector.select(remaining):
                fd = key.fd
                if fd == launcher.sock.fileno():
                    got = receive(launcher.sock)
                    selector.unregister(fd)
                    if got is None or not isinstance(got[0], Done):
                        launcher.kill()
                        return out
                    out.done = got[0]
                    deadline = min(deadline, time.monotonic() + _GRACE_S)
                    continue
                data = os.read(fd, 65536)
                if not data:
                    selector.unregister(fd)
                elif fd == output_r:
                    written += len(data)
                    tail = (tail + data)[-_TAIL:]
                    if written > call.limits.output_bytes:
                        stop("output")
                elif len(result) <= call.limits.output_bytes + _FRAMING:
                    result += data
                else:
                    stop("result")
    out.result = decode_only(bytes(result))
    out.written = bool(result)
    out.output = bytes(tail)
    return out
