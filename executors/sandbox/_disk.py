"""The call's work dir, in a tmpfs of its own.

A call's init (root, in the call's mount namespace, ahead of the call in a warm launcher)
mounts a tmpfs of at most `disk_bytes` and one file per 4 KiB of it at the sandbox's home, in
the root it has just built for the call (see `_view`), and makes the call's work dir in it. Its
pages are charged to the call's memory, and the kernel drops it with the call's last process:
no cleanup is left that could fail or take long, and the host touches no file for a call.
"""

from __future__ import annotations

__all__ = ["own_workdir"]

import os

from ._limits import SandboxLimits, size
from ._linux import mount_tmpfs
from ._view import make_room

_BYTES_PER_FILE = 4096


def own_workdir(home: str, limits: SandboxLimits) -> tuple[str, str]:
    """Mount the call's tmpfs at `home` in the call's root and make a fresh dir in it, for the
    tool's process to give to the call's user. Returns the dir, and what the layer enforces."""
    make_room(home)
    files = max(limits.disk_bytes // _BYTES_PER_FILE, 64)
    mount_tmpfs(home, f"size={limits.disk_bytes},nr_inodes={files},mode=0711")
    path = os.path.join(home, os.urandom(8).hex())
    os.mkdir(path, 0o700)
    return path, f"a tmpfs of {size(limits.disk_bytes)} and {files} files, gone with the call"
