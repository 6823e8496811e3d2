"""The call's work dir, in a tmpfs of its own.

A call's process (root, in a mount namespace of its own that copies its tree's root, ahead of
the call in a warm launcher) mounts a tmpfs of at most `disk_bytes` and one file per 4 KiB of
it at the sandbox's home, in that root (see `_view`), and makes the call's work dir in it; and
a fresh /dev/shm over its tree's. Their pages are charged to the call's memory, and the kernel
drops them with the call's last process: no cleanup is left that could fail or take long, no
file of one call is there for the next, and the host touches no file for a call.
"""

from __future__ import annotations

__all__ = ["own_workdir"]

import os

from ._limits import SandboxLimits, size
from ._linux import mount_tmpfs
from ._view import make_room

_BYTES_PER_FILE = 4096
_SHM = "mode=1777,size=64m"
"""The options of a call's /dev/shm."""


def own_workdir(home: str, limits: SandboxLimits) -> tuple[str, str]:
    """Mount the call's tmpfs at `home` in the call's root and make a fresh dir in it, for the
    tool's process to give to the call's user, and a fresh /dev/shm. Returns the dir, and what
    the layer enforces."""
    mount_tmpfs("/dev/shm", _SHM)
    make_room(home)
    files = max(limits.disk_bytes // _BYTES_PER_FILE, 64)
    mount_tmpfs(home, f"size={limits.disk_bytes},nr_inodes={files},mode=0711")
    path = os.path.join(home, os.urandom(8).hex())
    os.mkdir(path, 0o700)
    return path, f"a tmpfs of {size(limits.disk_bytes)} and {files} files, gone with the call"
