"""The call's work dir, in a tmpfs of its own.

A call's init (root, in the call's mount namespace, ahead of the call in a warm launcher)
covers the sandbox's home, an empty directory on the host, with a tmpfs of at most
`disk_bytes` and one file per 4 KiB of it, and makes the call's work dir in it. Its pages are
charged to the call's memory, and the kernel drops it with the call's last process: no
cleanup is left that could fail or take long, and the host touches no file for a call.
"""

from __future__ import annotations

__all__ = ["own_workdir"]

import ctypes
import os

from ._limits import SandboxLimits, size
from ._linux import libc
from ._view import show

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_BYTES_PER_FILE = 4096


def own_workdir(home: str, limits: SandboxLimits, covers: dict[str, int]) -> tuple[str, str]:
    """Cover `home` with the call's tmpfs (shown to the call's user even below a directory
    others may not enter, see `_view`) and make a fresh dir in it, for the tool's process to
    give to the call's user. Returns the dir, and what the layer enforces."""
    os.makedirs(home, 0o700, exist_ok=True)  # should a cleaner of old files have taken it
    show(home, covers)
    files = max(limits.disk_bytes // _BYTES_PER_FILE, 64)
    options = f"size={limits.disk_bytes},nr_inodes={files},mode=0711"
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
    if libc.mount(b"tmpfs", home.encode(), b"tmpfs", flags, options.encode()) == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs: {os.strerror(errno)}")
    path = os.path.join(home, os.urandom(8).hex())
    os.mkdir(path, 0o700)
    return path, f"a tmpfs of {size(limits.disk_bytes)} and {files} files, gone with the call"
