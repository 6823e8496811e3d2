"""The call's view of the filesystem, for a user of its own.

That user can only go where "others" may. When a path the call needs (the interpreter, its
libraries, `sys.path`, the tools' modules, its work dir) lies below a directory others may not
enter — say the interpreter is in a mode-0700 /root — that directory is covered, in the call's
private mount namespace, with an empty tmpfs, and only the needed paths are bound back.
Whatever else it held (keys, configs) is not there at all for the call.
"""

from __future__ import annotations

__all__ = ["interpreter_paths", "needed_paths", "reveal", "show", "unreadable"]

import os
import stat
import sys
from collections.abc import Iterable

from ._linux import bind, mount_tmpfs


def interpreter_paths() -> list[str]:
    """What any call needs: the interpreter's binary directory and its standard library."""
    return [os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.__file__)]


def needed_paths(extra: Iterable[str]) -> tuple[str, ...]:
    """The paths a call must be able to read: the interpreter, its prefixes, `sys.path`, and
    `extra` (the tools' module files, writable paths); each once, as real paths."""
    candidates = [
        *interpreter_paths(),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        *sys.path,
        *extra,
    ]
    return tuple(
        sorted({os.path.realpath(p or ".") for p in candidates if os.path.exists(p or ".")})
    )


def _blocking(path: str) -> str | None:
    """The outermost directory above `path` that others may not pass through, if any."""
    current = ""
    for part in path.strip("/").split("/")[:-1]:
        current += "/" + part
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(paths):
        if not any(path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _bind_in(path: str, handle: int) -> None:
    """Bind what `handle` (an O_PATH descriptor) refers to onto `path`, making the mount point."""
    source = f"/proc/self/fd/{handle}"
    if os.path.isdir(source):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()
    bind(source, path)


def reveal(paths: Iterable[str]) -> dict[str, int]:
    """Cover each directory that hides a needed path with a tmpfs and bind the needed paths
    back (root, in a private mount namespace). Returns each covered directory with a handle
    (O_PATH) on what it covers, through which `show` reaches paths below it later."""
    hidden: dict[str, list[str]] = {}
    for path in paths:
        top = _blocking(path)
        if top is not None:
            hidden.setdefault(top, []).append(path)
    covers: dict[str, int] = {}
    for top, inside in sorted(hidden.items()):
        inside = _outermost(inside)
        covers[top] = os.open(top, os.O_PATH | os.O_CLOEXEC)
        handles = [os.open(p, os.O_PATH | os.O_CLOEXEC) for p in inside]
        mount_tmpfs(top)
        for path, fd in zip(inside, handles, strict=True):
            _bind_in(path, fd)
            os.close(fd)
    return covers


def show(path: str, covers: dict[str, int]) -> str | None:
    """After `reveal` (which made `covers`), make one more directory reachable by others: bind
    it in where a cover hides it, or cover first a directory others may not enter. Returns
    the directory covered now, if any."""
    current = ""
    covered = None
    for part in path.strip("/").split("/")[:-1]:
        current += "/" + part
        if current in covers:
            below = os.path.relpath(path, current)
            handle = os.open(below, os.O_PATH | os.O_CLOEXEC, dir_fd=covers[current])
            break
        if not os.stat(current).st_mode & stat.S_IXOTH:
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
            mount_tmpfs(current)
            covered = current
            break
    else:
        return None
    try:
        _bind_in(path, handle)
    finally:
        os.close(handle)
    return covered


def unreadable(paths: Iterable[str]) -> str | None:
    """The first of `paths` the current user cannot read, if any."""
    for path in paths:
        mode = os.R_OK | (os.X_OK if os.path.isdir(path) else 0)
        if not os.access(path, mode):
            return path
    return None
