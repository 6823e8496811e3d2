"""A call's work dir and user, handed out together and taken back together.

Where calls get a tmpfs of their own (see `_disk`), a sandbox has one empty `home` on the
host, at whose path each call's tree mounts its tmpfs in the call's own root: a call makes and
leaves nothing here (the host's dir keeps the path the sandbox's own, and is what a writable
path above it shows). Otherwise its work dir is made here, and deleted one directory at a
time relative to open descriptors, so that no depth or path length can make it fail. A uid
goes back to the pool only once its dir is gone, and to the end of the queue (see `_uids`).
"""

from __future__ import annotations

__all__ = ["home", "remove", "workdir"]

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator

from ._uids import UIDS

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open(name: str, dir_fd: int | None) -> int:
    """Open the directory `name`, giving it back its owner's rights if the call took them."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:
        if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise
        os.chmod(name, 0o700, dir_fd=dir_fd)
        return os.open(name, _DIR, dir_fd=dir_fd)


def _clear(fd: int) -> list[str]:
    """Unlink all but the directories in the directory `fd`; returns their names."""
    dirs = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    return dirs


def _empty(path: str) -> None:
    """Delete all below `path`: down one directory at a time, back up through "..", holding
    one descriptor and, for each level, the names of the directories left to empty."""
    fd = _open(path, None)
    left = [_clear(fd)]
    try:
        while True:
            if left[-1]:
                below = _open(left[-1][-1], fd)
                os.close(fd)
                fd = below
                left.append(_clear(fd))
                continue
            left.pop()
            if not left:
                return
            above = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = above
            os.rmdir(left[-1].pop(), dir_fd=fd)
    finally:
        os.close(fd)


def remove(path: str) -> bool:
    """Delete `path` and all below it; True once it is gone. Never raises."""
    with contextlib.suppress(OSError):
        os.rmdir(path)
        return True
    with contextlib.suppress(OSError):
        _empty(path)
        os.rmdir(path)
    return not os.path.lexists(path)


def _prefix() -> str:
    return f"turnstile-sandbox-{os.getpid()}-"


def _sweep() -> None:
    """Remove the dirs that processes no longer running left (killed with -9, their sandboxes
    never closed): ours, named after a pid that is gone."""
    parent = tempfile.gettempdir()
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            parts = entry.name.split("-")
            if len(parts) < 4 or parts[:2] != ["turnstile", "sandbox"] or not parts[2].isdigit():
                continue
            if os.path.exists(f"/proc/{parts[2]}"):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.geteuid() and entry.is_dir(
                    follow_symlinks=False
                ):
                    remove(entry.path)


def home() -> str:
    """A sandbox's home: an empty private directory at whose path its calls' trees mount
    their tmpfs. Made after sweeping what killed processes left."""
    _sweep()
    return tempfile.mkdtemp(prefix=_prefix())


@contextlib.contextmanager
def workdir(separate_uid: bool, on_host: bool) -> Iterator[tuple[str, int | None]]:
    """A uid of the call's own if `separate_uid`, and if `on_host` a fresh private directory
    it owns (else "": the call's tree makes one), deleted with all in it afterwards."""
    uid = UIDS.acquire() if separate_uid else None
    path = ""
    try:
        if on_host:
            path = tempfile.mkdtemp(prefix=_prefix())
            if uid is not None:
                os.chown(path, uid, uid)
        yield path, uid
    finally:
        if (not path or remove(path)) and uid is not None:
            UIDS.release(uid)
