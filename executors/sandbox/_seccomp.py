"""seccomp: two syscall filters (built with libseccomp through ctypes) for the call's processes.

The first ("seccomp") refuses what a tool never needs and an escape often does: debugging
other processes, namespaces and mounts, kernel keyrings, BPF, io_uring (which bypasses the
filter), loading modules, faking terminal input. The second ("socket_families") lets sockets of
only the address families a call needs be made: unix, and IPv4 and IPv6 with network; vsock,
netlink, packet, crypto and every other family do not exist for it (EAFNOSUPPORT; IP without
network is ENETUNREACH, which reads as "no network"). Other architectures' syscall tables are
refused by libseccomp's default (the process is killed).

libseccomp compiles the rules to BPF programs once, in the host (`programs`); a launcher is
handed them (`adopt`), and each call's process installs those same programs, as `seccomp_load`
would, with one `prctl` each: no call pays for libseccomp.
"""

from __future__ import annotations

__all__ = ["Programs", "adopt", "load", "programs", "version"]

import ctypes
import errno
import functools
import os
import termios
from collections.abc import Callable

from ._linux import install_seccomp_filter

_ALLOW = 0x7FFF0000
_CMP_EQ = 4
_CMP_GE = 5
_CMP_MASKED_EQ = 7

_DENIED = (
    "ptrace process_vm_readv process_vm_writev pidfd_getfd kcmp "
    "mount umount2 pivot_root chroot unshare setns move_mount open_tree fsopen fsconfig "
    "fsmount fspick mount_setattr keyctl add_key request_key bpf perf_event_open userfaultfd "
    "kexec_load kexec_file_load init_module finit_module delete_module reboot swapon swapoff "
    "acct settimeofday clock_settime clock_adjtime adjtimex iopl ioperm io_uring_setup "
    "io_uring_enter io_uring_register open_by_handle_at name_to_handle_at quotactl syslog "
    "lookup_dcookie vhangup uselib"
).split()
_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000)
_UNIX = 1
_IP = (2, 10)  # AF_INET, AF_INET6
_FAMILIES = 64
"""Above the last address family (AF_MAX is 46 in Linux 6.x): each number below is ruled on
one by one, all above it (and any with the upper bits of the register set) at once."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError as e:
        raise OSError(errno.ENOENT, "libseccomp is not installed (Debian: libseccomp2)") from e
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    return lib


def version() -> str:
    """libseccomp's version, e.g. "2.5.4"; `OSError` if it cannot be loaded."""
    v = _library().seccomp_version().contents
    return f"{v.major}.{v.minor}.{v.micro}"


def _errno_action(code: int) -> int:
    return 0x00050000 | code


_Cmp = tuple[int, int, int, int]


def _adder(lib: ctypes.CDLL, ctx: int) -> Callable[..., bool]:
    def rule(action: int, name: str, *cmps: _Cmp) -> bool:
        """Add a rule for syscall `name`; False if it is not one on this architecture."""
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            return False
        array = (_ArgCmp * max(len(cmps), 1))(*(_ArgCmp(*c) for c in cmps))
        result = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
        if result < 0:
            raise OSError(-result, f"seccomp rule for {name}: {errno.errorcode.get(-result)}")
        return True

    return rule


def _syscalls(rule: Callable[..., bool], network: bool) -> str:
    eperm = _errno_action(errno.EPERM)
    denied = sum(rule(eperm, name) for name in _DENIED)
    rule(_errno_action(errno.ENOSYS), "clone3")  # glibc then falls back to clone
    for flag in _NAMESPACE_FLAGS:
        rule(eperm, "clone", (0, _CMP_MASKED_EQ, flag, flag))
    rule(eperm, "ioctl", (1, _CMP_EQ, termios.TIOCSTI, 0))
    return f"{denied} syscalls, namespaces"


def _families(rule: Callable[..., bool], network: bool) -> str:
    allowed = {_UNIX, *(_IP if network else ())}
    unreachable = _errno_action(errno.ENETUNREACH)
    unsupported = _errno_action(errno.EAFNOSUPPORT)
    for family in set(range(_FAMILIES)) - allowed:
        action = unsupported if network or family not in _IP else unreachable
        rule(action, "socket", (0, _CMP_EQ, family, 0))
    rule(unsupported, "socket", (0, _CMP_GE, _FAMILIES, 0))
    return "unix and IP sockets only" if network else "unix sockets only"


_FILTERS = {"seccomp": _syscalls, "socket_families": _families}


def _compile(lib: ctypes.CDLL, name: str, network: bool) -> tuple[bytes, str]:
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        detail = _FILTERS[name](_adder(lib, ctx), network)
        fd = os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC)
        try:
            result = lib.seccomp_export_bpf(ctx, fd)
            if result < 0:
                raise OSError(-result, f"seccomp_export_bpf: {errno.errorcode.get(-result)}")
            program = os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    return program, f"libseccomp {version()}: {detail}"


Programs = dict[str, tuple[bytes, str]]
"""Each filter's name: its BPF program and what it refuses."""

_adopted: dict[bool, Programs] = {}


@functools.cache
def _compiled(network: bool) -> Programs:
    lib = _library()
    return {name: _compile(lib, name, network) for name in _FILTERS}


def programs(*, network: bool) -> Programs | str:
    """Each filter ("seccomp", "socket_families") as a BPF program (libseccomp's
    `seccomp_export_bpf`), or why they cannot be made. Compiled once per process."""
    try:
        return _compiled(network)
    except OSError as e:
        return e.strerror or str(e)


def adopt(network: bool, given: Programs | str) -> None:
    """Install `given` (from the host's `programs`) as the filters `load` installs, so that
    this process and its children need not load libseccomp."""
    if not isinstance(given, str):
        _adopted[network] = given


def load(name: str, *, network: bool, privileged: bool = False) -> str:
    """Install filter `name` on this process (inherited by all it starts); says what it
    refuses. `privileged`: without setting no_new_privs (this process holds CAP_SYS_ADMIN)."""
    found = _adopted.get(network) or programs(network=network)
    if isinstance(found, str):
        raise OSError(errno.ENOENT, found)
    program, detail = found[name]
    install_seccomp_filter(program, no_new_privs_first=not privileged)
    return detail
