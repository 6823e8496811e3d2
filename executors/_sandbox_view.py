"""The call's view of the filesystem, for a user of its own.

That user can only go where "others" may. When a path the call needs (the interpreter, its
libraries, `sys.path`, the tools' modules, its work dir) lies below a directory others may not
enter — say the interpreter is in a mode-0700 /root — that directory is covered, in the call's
private mount namespace, with an empty tmpfs, and only the needed paths are bound back.
Whatever else it held (keys, configs) is not there at all for the call.
"""

from __future__ import annotations

__all__ = ["interpreter_paths", "needed_paths", "reveal", "unreadable"]

import os
import stat
import sys
from collections.abc import Iterable

from ._sandbox_linux import bind, mount_tmpfs


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


def reveal(paths: Iterable[str]) -> list[str]:
    """Cover each directory that hides a needed path with a tmpfs and bind the needed paths
    back (root, in a private mount namespace). Returns the covered directories."""
    hidden: dict[str, list[str]] = {}
    for path in paths:
        top = _blocking(path)
        if top is not None:
            hidden.setdefault(top, []).append(path)
    for top, inside in hidden.items():
        inside = _outermost(inside)
        handles = [os.open(p, os.O_PATH | os.O_CLOEXEC) for p in inside]
        mount_tmpfs(top)
        for path, fd in zip(inside, handles, strict=True):
            source = f"/proc/self/fd/{fd}"
            if os.path.isdir(source):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            bind(source, path)
            os.close(fd)
    return sorted(hidden)


def unreadable(paths: Iterable[str]) -> str | None:
    """The first of `paths` the current user cannot read, if any."""
    for path in paths:
        mode = os.R_OK | (os.X_OK if os.path.isdir(path) else 0)
        if not os.access(path, mode):
            return path
    return None
