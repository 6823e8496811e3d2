"""What crosses between the host, a launcher and a call's processes: msgpack-encoded msgspec
messages, each framed as a 4-byte big-endian length and the message.

The host sends `Start`/`Kill`/`Prepare` to a launcher over a unix socket and gets `Done` back.
A `Start` comes with three descriptors: a memfd holding the framed `Call`, and the call's result
and output pipes. The launcher never reads the memfd (the trees it forks later must not inherit
a call); it hands all three on to the tool's process, which reads its `Call`, writes one
`Result` (or, for a probe, a `Report`) to the result pipe; the call's init tells the launcher
how the tool's process ended (`Exited`).
"""

from __future__ import annotations

__all__ = [
    "Call",
    "Done",
    "Exited",
    "Kill",
    "Message",
    "Prepare",
    "Report",
    "Result",
    "Start",
    "Tree",
    "UnsendableDeps",
    "decode_deps",
    "decode_only",
    "encode_deps",
    "frame",
    "receive",
    "send",
    "write_all",
]

import os
import socket
import struct
from typing import Any

import msgspec
from turnstile.core._errors import TurnstileError
from turnstile.core._messages import ResultPart
from turnstile.core._tools import ToolSpec

from ._cgroup import Hierarchy
from ._layers import Layer
from ._limits import SandboxLimits

_MAX_FDS = 8
_HEADER = struct.Struct(">I")


class UnsendableDeps(TurnstileError, TypeError):
    """The run's deps cannot cross to a sandbox's processes: only plain data does (msgspec
    Structs, dataclasses, dicts, lists, strings, numbers...). Give the `Sandbox` a `deps=`
    function that picks what its tools need, or keep a tool that needs the rest out of it."""

    def __init__(self, kind: str, why: str) -> None:
        self.kind = kind
        super().__init__(
            f"deps of type {kind} cannot cross to the sandbox's processes ({why}): only plain "
            "data does. Give Sandbox(..., deps=...) a function that picks what the tools need."
        )


class Call(msgspec.Struct, tag="call", frozen=True, kw_only=True):
    """Run `tool` ("module:attribute", described by `spec`) with `arguments` in `workdir` ("":
    the one its tree made, in the call's own tmpfs) as `uid`, applying `layers` (all of them,
    or the call fails); a probe tries every layer and reports. With `egress`, the call reaches
    that socket (see `_egress`) and nothing else."""

    tool: str
    spec: ToolSpec
    arguments: Any  # as the model sent them: `invoke` checks them, as in-process
    call_id: str | None = None  # for a tool that asks for its `ToolContext`
    deps: bytes | None = None  # the run's deps as the sandbox lets them cross, msgpack-encoded
    workdir: str
    uid: int | None
    limits: SandboxLimits
    layers: tuple[str, ...]
    probe: bool = False
    egress: str = ""  # the egress proxy's socket, bound into the call's root ("": none)
    env: dict[str, str] = {}  # set in the call's environment: the proxy's socket, placeholders


class Tree(msgspec.Struct, frozen=True):
    """What a call's process tree is made for: calls applying `layers` within `limits` whose
    root holds `needed` of the host (see `_view.needed_paths`), with their work dirs below
    `home` (the path in that root the tree covers with the call's tmpfs; None without one)
    and their cgroups in `cgroups` (or why they cannot have one), with the seccomp `filters`
    the host compiled (or why it could not). The same for every call of a sandbox."""

    layers: tuple[str, ...]
    needed: tuple[str, ...]
    limits: SandboxLimits
    home: str | None = None
    cgroups: Hierarchy | str = "not asked for"
    filters: dict[str, tuple[bytes, str]] | str = "not asked for"
    egress: str = ""
    """The egress proxy's socket, shown to every call (see `_egress`); "" without one."""
    workspace: bool = False
    """Whether the calls bring work dirs of their own (a `Workspace`'s): a process made ahead
    of its call is then not confined ahead, as its work dir is known only with its call."""


class Start(msgspec.Struct, tag="start", frozen=True):
    """Run the call sent along (in a memfd, with its pipes) on a tree made for `tree`."""

    tree: Tree


class Kill(msgspec.Struct, tag="kill", frozen=True):
    """Kill the running call now (timeout, or too much output)."""


class Prepare(msgspec.Struct, tag="prepare", frozen=True):
    """Keep the next call's process tree made ahead, for calls like `tree`: a warm launcher's
    calls then cost no fork and no namespace setup."""

    tree: Tree


class Done(msgspec.Struct, tag="done", frozen=True):
    """The call's processes are all gone; `killed` if a `Kill` ended it, `strays` if some were
    still running after the tool's own process had exited, `wait_status` how that process
    ended (as `os.waitpid` gives it; None if its init could not tell), `limit` the limit of
    the call's processes together ("cpu", "memory") that ended it, if one did."""

    killed: bool
    strays: bool
    wait_status: int | None
    limit: str | None = None


class Result(msgspec.Struct, tag="result", frozen=True):
    content: str | list[ResultPart]
    is_error: bool


class Report(msgspec.Struct, tag="report", frozen=True):
    layers: dict[str, Layer]


class Exited(msgspec.Struct, tag="exited", frozen=True):
    """From a call's init: how the tool's process ended, and whether other processes of the
    call were still running then."""

    wait_status: int
    strays: bool


Message = Call | Start | Kill | Prepare | Done | Result | Report | Exited

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (a pipe or a memfd may take it in parts)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def frame(message: Message) -> bytes:
    body = _encoder.encode(message)
    return _HEADER.pack(len(body)) + body


def encode_deps(deps: Any) -> bytes:
    """A run's deps as they cross to a call's process; raises `UnsendableDeps` for what msgpack
    cannot carry (a connection, a lock, a function, a structure that holds itself)."""
    try:
        return _encoder.encode(deps)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise UnsendableDeps(type(deps).__name__, str(e)) from None


def decode_deps(raw: bytes, type_: Any) -> Any:
    """The deps in a call's process, as the type its tool gives them (`ToolContext[T]`)."""
    return msgspec.msgpack.decode(raw, type=type_)


def decode_only(data: bytes) -> Message | None:
    """The message if `data` is exactly one whole frame that decodes, else None."""
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != len(data) - _HEADER.size:
        return None
    try:
        return _decoder.decode(data[_HEADER.size :])
    except msgspec.DecodeError:
        return None


def send(sock: socket.socket, message: Message, fds: tuple[int, ...] = ()) -> None:
    data = frame(message)
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):
        sock.sendall(data[sent:])


def _exactly(sock: socket.socket, n: int, fds: list[int]) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        data, more, _, _ = socket.recv_fds(sock, n, _MAX_FDS)
        fds.extend(more)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def receive(sock: socket.socket) -> tuple[Message, list[int]] | None:
    """The next message and the descriptors sent with it; None once the peer has hung up."""
    fds: list[int] = []
    header = _exactly(sock, _HEADER.size, fds)
    body = None if header is None else _exactly(sock, _HEADER.unpack(header)[0], fds)
    if body is None:
        for fd in fds:
            socket.close(fd)
        return None
    return _decoder.decode(body), fds
