"""The tool's process: wait for the call, confine itself, import the tool by path, `invoke` it,
write one `Result`.

Argument checking and error messages are `invoke`'s own; an exception that a sandbox limit
probably caused gets that limit appended. Nothing of the tool runs before confinement, not even
its module's import.
"""

from __future__ import annotations

__all__ = ["serve"]

import contextlib
import errno
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

import msgspec
from msgspec.json import encode
from turnstile.core._tools import Tool, ToolContext, ToolOutcome, ToolSpec
from turnstile.executors._invoke import ainvoke, failure, invoke

from . import _tunnel as tunnel
from ._confine import AT_CALL, RESULT_FD, confine, plumb, rehearse
from ._layers import LAYERS, Layer
from ._limits import SandboxLimits
from ._linux import set_parent_death_signal
from ._refs import resolve
from ._verdict import exception_hint, too_large_message
from ._view import private_ipc, show
from ._wire import (
    Call,
    Message,
    Report,
    Result,
    Tree,
    decode_deps,
    decode_only,
    frame,
    receive,
    write_all,
)


def _hinting(limits: SandboxLimits) -> Callable[[Tool, BaseException], ToolOutcome]:
    """`failure`, naming the sandbox limit that likely caused the exception."""

    def failed(tool: Tool, exc: BaseException) -> ToolOutcome:
        outcome = failure(tool, exc)
        hint = exception_hint(exc, limits)
        return outcome if hint is None else ToolOutcome(f"{outcome.content} ({hint})", True)

    return failed


def _load(call: Call) -> Tool:
    found = resolve(call.tool)
    return Tool(found.fn if isinstance(found, Tool) else found, call.spec)


def _invoke(call: Call) -> Result:
    try:
        t = _load(call)
    except Exception as e:
        return Result(f"cannot load tool {call.tool}: {type(e).__name__}: {e}", True)
    if call.call_id is None:
        context = None
    else:
        try:
            deps = None if call.deps is None else decode_deps(call.deps, t.deps_type)
        except msgspec.ValidationError as e:
            return Result(f"{t.name}'s deps do not convert to {t.deps_type!r}: {e}", True)
        context = ToolContext(call.call_id, deps)
    failed = _hinting(call.limits)
    if t.is_async:
        import asyncio

        outcome = asyncio.run(ainvoke(t, call.arguments, context, failed=failed))
    else:
        outcome = invoke(t, call.arguments, context, failed=failed)
    content = outcome.content
    length = len(content.encode(errors="replace") if isinstance(content, str) else encode(content))
    if length > call.limits.output_bytes:
        return Result(too_large_message(t.name, call.limits, length), True)
    return Result(outcome.content, outcome.is_error)


def _stand_in(text: str) -> str:
    """What `_rehearse` runs in place of a tool."""
    return text


def _rehearse() -> None:
    """While the tree waits for its call, take on a stand-in of ours the steps a call takes
    (setting its environment, and all once its tool is loaded): their first run in a freshly
    forked process (copy-on-write faults, the interpreter specializing its code) is then paid
    before the call, not in it."""
    rehearse()
    stand_in = Tool(_stand_in, ToolSpec("stand_in"))
    outcome = invoke(stand_in, {"text": "ready"}, failed=_hinting(SandboxLimits()))
    frame(Result(outcome.content, outcome.is_error))


def _write(message: Message) -> None:
    write_all(RESULT_FD, frame(message))


def _stop() -> None:
    """End a call that went well by closing every descriptor (the host reads the ends of its
    pipes) and stopping with SIGSTOP, every thread at once: init answers the call as soon as
    it sees the stop, then kills this process, whose exit (tearing down its memory, about a
    millisecond) is then off the answer's way. A stopped process runs no more code, and no
    system call of its is left half done."""
    os.closerange(0, 1 << 20)
    os.kill(os.getpid(), signal.SIGSTOP)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _private_ipc(covers: dict[str, int]) -> Layer:
    """Ahead of the call: an IPC namespace of the tool process's own (its init has none)."""
    try:
        return Layer(True, private_ipc(rooted="/" in covers))
    except OSError as e:
        needs = " (needs root)" if e.errno == errno.EPERM else ""
        return Layer(False, (e.strerror or str(e)) + needs)


def _own_workdir(
    call: Call, workdir: str | None, layers: dict[str, Layer]
) -> tuple[Call, str | None]:
    """The call with the work dir its tree made if it came without one, given to the call's
    user; and the mount point of the call's tmpfs that dir is in, if it is in one."""
    if call.workdir or workdir is None:
        return call, None
    call = msgspec.structs.replace(call, workdir=workdir)
    if not layers.get("workdir_tmpfs", Layer(False, "")).in_force:
        return call, None  # its home on the host: a call is refused, a probe goes on
    if call.uid is not None:
        os.chown(workdir, call.uid, call.uid)
    return call, os.path.dirname(workdir)


def _show_own_paths(call: Call, covers: dict[str, int], tmpfs: str | None) -> Layer:
    """Bind the call's writable paths into the root built for it, if any, and its work dir
    too unless that is in the call's `tmpfs` (which stays on top)."""
    if "/" not in covers:
        return Layer(False, "needs mount_namespace")
    paths = (*call.limits.writable_paths, *((call.egress,) if call.egress else ()))
    try:
        show(paths if tmpfs else (call.workdir, *paths), covers, tmpfs)
    except OSError as e:
        return Layer(False, e.strerror or str(e))
    detail = "its own: the interpreter, its packages and the tools' modules read-only"
    return Layer(True, f"{detail}, its work dir and writable paths read-write; no other path")


def _confined_ahead(
    kind: Tree, workdir: str, made: dict[str, Layer], covers: dict[str, int]
) -> dict[str, Layer] | None:
    """In a process made ahead of its call in a root of its own, with its work dir in its own
    tmpfs (holding CAP_SYS_ADMIN there): take every step of confinement but those `AT_CALL`,
    as for a call like those its tree is made for. The layers of those steps, None if not."""
    if kind.workspace or not made.get("workdir_tmpfs", Layer(False, "")).in_force:
        return None
    if "/" not in covers:
        return None
    uid = 0 if "separate_uid" in kind.layers else None  # its call's, which will be another
    like = Call(
        tool="",
        spec=ToolSpec("ahead"),
        arguments=None,
        workdir=workdir,
        uid=uid,
        limits=kind.limits,
        layers=kind.layers,
        egress=kind.egress,
    )
    layers = {"private_root": _show_own_paths(like, covers, os.path.dirname(workdir))}
    ahead = tuple(name for name in LAYERS if name not in AT_CALL)
    confine(like, set(kind.layers), layers, kind.needed, ahead)
    return layers


def serve(
    sock: socket.socket,
    made: dict[str, Layer],
    covers: dict[str, int],
    workdir: str | None,
    kind: Tree,
    ahead: bool,
    made_them: int = -1,
    stops: bool = False,
) -> NoReturn:
    """Wait on `sock` for the call (in a memfd) and its result and output pipes, confine this
    process (the launcher, init and this process ahead of its call recorded the layers they
    `made`; `covers` holds the way to the host's mount namespace if they built the call a root,
    `workdir` the work dir made in the call's tmpfs), then run the call or, for a probe, report
    the layers; exits, never returns. Made `ahead` of its call for calls like `kind`, it
    rehearses and confines itself while it waits (unless the call is there already), all but
    the steps that take the call. Without a root of its own, Landlock lets it read only the
    host paths its root would hold (`kind.needed`). It tells init on `made_them` once it has
    made its namespaces. If init `stops` it, a call that ends well stops (`_stop`) instead of
    exiting."""
    set_parent_death_signal(signal.SIGKILL)
    made = {**made, "ipc_namespace": _private_ipc(covers)}
    if made_them >= 0:  # init holds this process's namespaces from here on
        os.write(made_them, b".")
        os.close(made_them)
    early = None
    if ahead and not select.select([sock], [], [], 0)[0]:  # not if its call is there already
        with contextlib.suppress(Exception):  # it would only have saved time
            _rehearse()
        if workdir:
            early = _confined_ahead(kind, workdir, made, covers)
    _, fds = receive(sock) or (None, [])
    sock.close()
    if len(fds) != 3:
        os._exit(0)  # the launcher let this tree go unused
    call_fd, result_fd, output_fd = fds
    call = decode_only(os.pread(call_fd, os.fstat(call_fd).st_size, 0))
    os.close(call_fd)
    if not isinstance(call, Call):
        os._exit(70)
    wanted = set(LAYERS) if call.probe else set(call.layers)
    layers = {name: layer for name, layer in made.items() if name in wanted}
    me = os.getpid()
    code = 0
    try:
        call, tmpfs = _own_workdir(call, workdir, layers)
        if early is None:
            root = _show_own_paths(call, covers, tmpfs)
        else:  # (a call like those of its tree, or it is refused)
            like = (call.layers, call.limits, call.egress, call.probe) == (
                kind.layers,
                kind.limits,
                kind.egress,
                False,
            )
            root = early.pop("private_root") if like else Layer(False, "made for other calls")
            layers.update((name, layer) for name, layer in early.items() if name in wanted)
        if "private_root" in wanted:
            layers["private_root"] = root
        plumb(result_fd, output_fd)  # closes the covers' handles too
        ready = all(layer.in_force for layer in layers.values())
        steps = LAYERS if early is None else AT_CALL
        ready = confine(call, wanted, layers, kind.needed, steps) and ready
        if call.probe:
            _write(Report(layers))
        elif not ready:
            failed = next(n for n in LAYERS if n in layers and not layers[n].in_force)
            _write(Result(f"the sandbox could not set up {failed}: {layers[failed].detail}", True))
        else:
            if call.egress:
                tunnel.install(call.egress)
                os.environ.update(call.env)
            result = _invoke(call)
            sys.stdout.flush()
            sys.stderr.flush()
            if os.getpid() == me:  # not a fork the tool made and returned through us
                _write(result)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            if stops and code == 0 and os.getpid() == me:
                _stop()
            os._exit(code)
