"""Tools that work in their call's work dir, for the workspace's tests (the sandbox imports
them by path)."""

from __future__ import annotations

import os

from turnstile.core import tool


@tool
def put(name: str, text: str) -> str:
    """Write `text` to the file `name` in the work dir."""
    with open(name, "w") as f:
        f.write(text)
    return "ok"


@tool
def read(name: str) -> str:
    """The text of the file `name` in the work dir, or "missing"."""
    try:
        with open(name) as f:
            return f.read()
    except FileNotFoundError:
        return "missing"


@tool
def fill(files: int, size: int) -> str:
    """Write `files` files of `size` bytes each."""
    for i in range(files):
        with open(f"fill-{i}", "wb") as f:
            f.write(b"x" * size)
    return "filled"


@tool
def plant(name: str, target: str) -> str:
    """Make `name` a symlink to `target`."""
    os.symlink(target, name)
    return "planted"


@tool
def nest(depth: int) -> str:
    """Make `depth` directories, each in the one before."""
    os.makedirs("/".join(["d"] * depth))
    return "nested"


@tool
def hide(name: str) -> str:
    """Take every right on the file `name` and on a directory holding a copy of it."""
    os.mkdir("hidden")
    with open(name) as f, open("hidden/" + name, "w") as copy:
        copy.write(f.read())
    os.chmod("hidden/" + name, 0)
    os.chmod("hidden", 0)
    os.chmod(name, 0)
    return "hidden"


@tool
def special(name: str) -> str:
    """Make a fifo and a unix socket in the work dir."""
    import socket

    os.mkfifo(name)
    socket.socket(socket.AF_UNIX).bind(name + ".sock")
    return "made"


@tool
def owners() -> list[int]:
    """The uids owning each thing in the work dir, and the call's own uid last."""
    found = {os.lstat(os.path.join(d, n)).st_uid for d, ds, fs in os.walk(".") for n in ds + fs}
    return [*sorted(found), os.getuid()]
