"""The call's work dir as a tmpfs of its own, mounted over the host's empty dir in the call's
mount namespace: at most `disk_bytes` and one file per 4 KiB of it, its pages charged to the
call's memory, and gone with the call's last process (the kernel drops the namespace, and the
tmpfs with it), so that no cleanup is left that could fail or take long."""

from __future__ import annotations

__all__ = ["mount_workdir"]

import ctypes
import os

from ._limits import SandboxLimits, size
from ._linux import libc

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_BYTES_PER_FILE = 4096


def mount_workdir(path: str, limits: SandboxLimits, uid: int | None) -> str:
    """Mount the call's tmpfs on `path` (root, in the call's mount namespace), owned by `uid`
    if given; says what it holds."""
    files = max(limits.disk_bytes // _BYTES_PER_FILE, 64)
    options = f"size={limits.disk_bytes},nr_inodes={files},mode=0700"
    if uid is not None:
        options += f",uid={uid},gid={uid}"
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    if libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, options.encode()) == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs: {os.strerror(errno)}")
    return f"a tmpfs of {size(limits.disk_bytes)} and {files} files, gone with the call"
