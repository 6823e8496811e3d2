"""The call's work dir, in a tmpfs of its own.

A call's process (root, in a mount namespace of its own that copies its tree's root, ahead of
the call in a warm launcher) mounts a tmpfs of at most `disk_bytes` and one file per 4 KiB of
it at the sandbox's home, in that root (see `_view`), and makes the call's work dir in it; and
a fresh /dev/shm over its tree's. Their pages are charged to the call's memory, and the kernel
drops them with the call's last process: no cleanup is left that could fail or take long, no
file of one call is there for the next, and the host touches no file for a call.
"""

from __future__ import annotations

__all__ = ["call_mounts", "own_workdir"]

import os
from collections.abc import Callable

from ._layers import Layer
from ._limits import SandboxLimits, size
from ._linux import mount_tmpfs
from ._view import make_room, own_mounts
from ._wire import Tree

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


def call_mounts(
    kind: Tree, layers: dict[str, Layer], failed: Callable[[OSError], Layer]
) -> str | None:
    """In a call's process, ahead of its call: a mount namespace of its own, copying its tree's
    root, and there the call's own tmpfs (its work dir in it) and /dev/shm, all gone with the
    call. Returns the work dir (its tree's home where the tmpfs failed: a call is refused)."""
    if layers.get("mount_namespace", Layer(False, "")).in_force:
        try:
            own_mounts()
        except OSError as e:
            layers["mount_namespace"] = failed(e)
    workdir = kind.home
    if "workdir_tmpfs" in kind.layers:
        try:
            if not layers.get("mount_namespace", Layer(False, "")).in_force or not kind.home:
                raise OSError("needs mount_namespace")
            workdir, detail = own_workdir(kind.home, kind.limits)
            layers["workdir_tmpfs"] = Layer(True, detail)
        except OSError as e:
            layers["workdir_tmpfs"] = failed(e)
    return workdir
