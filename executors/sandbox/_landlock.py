"""Landlock: the kernel lets the call write only below the paths it is given, even as root.

Reads stay allowed everywhere (the interpreter and the tool's modules must load), unless the
call is given the paths it may read (a call without a root of its own). Newer ABIs
add more: TCP bind/connect (ABI 4) and scoping of signals and abstract unix sockets to the
call's own processes (ABI 6). Whatever the running kernel offers is used; `restrict` says what.
"""

from __future__ import annotations

__all__ = ["abi", "restrict"]

import ctypes
import os
from collections.abc import Sequence

from ._linux import libc

_CREATE_RULESET = 444  # the same number on every architecture
_ADD_RULE = 445
_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args: object) -> int:
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"landlock: {os.strerror(errno)}")
    return int(result)


def abi() -> int:
    """The Landlock ABI version of the running kernel; `OSError` if it has none enabled."""
    return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)


def _write_rights(version: int) -> tuple[int, int]:
    """(rights handled for directories, the subset that applies to a single file)."""
    directory = (
        _WRITE_FILE
        | _REMOVE_DIR
        | _REMOVE_FILE
        | _MAKE_CHAR
        | _MAKE_DIR
        | _MAKE_REG
        | _MAKE_SOCK
        | _MAKE_FIFO
        | _MAKE_BLOCK
        | _MAKE_SYM
    )
    file = _WRITE_FILE
    if version >= 2:
        directory |= _REFER
    if version >= 3:
        directory |= _TRUNCATE
        file |= _TRUNCATE
    return directory, file


def _allow(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(rights, fd)
        _syscall(_ADD_RULE, ctypes.c_int(ruleset), _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)


def restrict(
    writable: Sequence[str], *, network: bool, readable: Sequence[str] | None = None
) -> str:
    """Confine this process (and all it starts) to writing below `writable` and, if given, to
    reading and running below `readable` and `writable` only; without `network`, deny TCP where
    the ABI allows. Returns what is enforced, e.g. "ABI 7: writes, TCP, ..."."""
    version = abi()
    directory, file = _write_rights(version)
    enforced = ["writes"]
    reads = (0, 0)
    if readable is not None:
        reads = (_READ_FILE | _READ_DIR | _EXECUTE, _READ_FILE | _EXECUTE)
        enforced.append("reads")
    directory, file = directory | reads[0], file | reads[1]
    attr = _RulesetAttr(directory, 0, 0)
    size = 8
    if version >= 4:
        size = 16
        if not network:
            attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
            enforced.append("TCP")
    if version >= 6:
        size = 24
        attr.scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
        enforced.append("signals, abstract sockets")
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for path in writable:
            _allow(ruleset, path, directory if os.path.isdir(path) else file)
        for path in readable or ():
            _allow(ruleset, path, reads[0] if os.path.isdir(path) else reads[1])
        _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), 0)
    finally:
        os.close(ruleset)
    return f"ABI {version}: {', '.join(enforced)}"
