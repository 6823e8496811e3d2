"""A call's work dir and user, handed out together and taken back together.

The dir is made empty here. Where the call has a mount namespace, its files live in a tmpfs
mounted over the dir there (see `_disk`), gone with the call, and the dir is left empty;
otherwise they are deleted here, one directory at a time and relative to open descriptors, so
that no depth or path length can make it fail. Its uid goes back to the pool only once the dir
is gone, and to the end of the queue (see `_uids`)."""

from __future__ import annotations

__all__ = ["workdir"]

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


def _remove(path: str) -> bool:
    """Delete `path` and all below it; True once it is gone. Never raises."""
    with contextlib.suppress(OSError):
        os.rmdir(path)  # empty: its files were in the call's own tmpfs
        return True
    with contextlib.suppress(OSError):
        _empty(path)
        os.rmdir(path)
    return not os.path.lexists(path)


@contextlib.contextmanager
def workdir(separate_uid: bool) -> Iterator[tuple[str, int | None]]:
    """A fresh private directory and, if `separate_uid`, a uid of its own that owns it;
    deleted with all in it afterwards."""
    uid = UIDS.acquire() if separate_uid else None
    path = None
    try:
        path = tempfile.mkdtemp(prefix="turnstile-sandbox-")
        if uid is not None:
            os.chown(path, uid, uid)
        yield path, uid
    finally:
        if (path is None or _remove(path)) and uid is not None:
            UIDS.release(uid)
