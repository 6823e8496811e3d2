"""What the model reads when a sandboxed call misbehaves: one short sentence naming the limit.

Exceptions keep `invoke`'s message, with the limit that likely caused them appended; a
process that died, hung or flooded its output is described from how it ended.
"""

from __future__ import annotations

__all__ = [
    "exception_hint",
    "exit_message",
    "forged_message",
    "killed_message",
    "limit_message",
    "stray_message",
    "too_large_message",
]

import errno
import os
import signal
import socket

from ._limits import SandboxLimits, size

_FILE_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}
_UNREACHABLE = {errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH}


def exception_hint(exc: BaseException, limits: SandboxLimits) -> str | None:
    """The sandbox limit an exception raised inside a call most likely comes from, if any."""
    if isinstance(exc, MemoryError):
        return f"the sandbox's memory limit is {size(limits.memory_bytes)}"
    if not limits.network and isinstance(exc, socket.gaierror):
        return "the sandbox has no network"
    if not isinstance(exc, OSError):
        return None
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return f"the sandbox allows {limits.open_files} open files"
    if exc.errno == errno.EFBIG:
        return f"the sandbox's file size limit is {size(limits.file_bytes)}"
    if exc.errno == errno.ENOSPC:
        return f"the sandbox's work dir holds at most {size(limits.disk_bytes)}"
    if isinstance(exc, BlockingIOError) and exc.errno == errno.EAGAIN:
        return f"the sandbox allows {limits.processes} processes"
    if not limits.network and exc.errno in _UNREACHABLE:
        return "the sandbox has no network"
    if exc.errno in _FILE_DENIED and exc.filename is not None:
        return "the sandbox runs unprivileged and may write only in its work dir"
    return None


def killed_message(name: str, reason: str, limits: SandboxLimits, wall_s: float) -> str:
    """A call the host stopped: `reason` is "timeout" or "output"."""
    if reason == "timeout":
        return f"{name} timed out after {wall_s:g} s (the sandbox's wall-clock limit)"
    return (
        f"{name} was stopped: it wrote more than {size(limits.output_bytes)} to stdout/stderr "
        "(the sandbox's output limit)"
    )


def too_large_message(name: str, limits: SandboxLimits, length: int | None = None) -> str:
    """A result over the output limit (`length` unknown when the host had to cut it off)."""
    amount = "more" if length is None else size(length)
    return (
        f"{name} returned {amount}, more than the sandbox's output limit "
        f"of {size(limits.output_bytes)}"
    )


def stray_message(name: str, content: str) -> str:
    """A call that returned but left processes running (the sandbox killed them)."""
    return (
        f"{name} left processes running after it returned; the sandbox killed them "
        f"(a call's processes must end with it). Its result was: {content}"
    )


def forged_message(name: str) -> str:
    """A call that exited cleanly but wrote something other than its one result."""
    return f"{name} wrote to the sandbox's result pipe itself; its result cannot be trusted"


def _cpu_message(name: str, limits: SandboxLimits) -> str:
    return f"{name} was stopped after {limits.cpu_s} s of CPU time (the sandbox's CPU limit)"


def limit_message(name: str, limit: str, limits: SandboxLimits) -> str:
    """A call ended at a limit of all its processes together: `limit` is "cpu" or "memory"."""
    if limit == "cpu":
        return _cpu_message(name, limits)
    return (
        f"{name} was killed: its processes together used more than "
        f"{size(limits.memory_bytes)} of memory (the sandbox's memory limit)"
    )


def _last_line(output: bytes) -> str:
    lines = output.decode(errors="replace").strip().splitlines()
    return lines[-1][:200] if lines else ""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_message(name: str, wait_status: int, limits: SandboxLimits, output: bytes) -> str:
    """A call whose process ended without returning a result."""
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        if signum == signal.SIGXCPU:
            return _cpu_message(name, limits)
        if signum == signal.SIGXFSZ:
            return (
                f"{name} was stopped: it wrote a file over {size(limits.file_bytes)} "
                "(the sandbox's file size limit)"
            )
        if signum == signal.SIGKILL:
            return (
                f"{name} was killed (SIGKILL): it may have exceeded the sandbox's CPU "
                f"({limits.cpu_s} s) or memory ({size(limits.memory_bytes)}) limit"
            )
        return f"{name} crashed: killed by {_signal_name(signum)}"
    code = os.WEXITSTATUS(wait_status)
    line = _last_line(output)
    return f"{name} exited with status {code} before returning a result" + (
        f": {line}" if line else ""
    )
