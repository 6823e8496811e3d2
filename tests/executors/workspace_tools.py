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
