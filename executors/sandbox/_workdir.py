"""A call's work dir: created empty before it, owned by its user, removed after it."""

from __future__ import annotations

__all__ = ["workdir"]

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


def _remove(path: str) -> None:
    """Delete `path` and all below it, even where the call took its own permissions away."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path):
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def workdir(uid: int | None) -> Iterator[str]:
    """A fresh private directory (given to `uid` if set), deleted with all in it afterwards."""
    path = tempfile.mkdtemp(prefix="turnstile-sandbox-")
    try:
        if uid is not None:
            os.chown(path, uid, uid)
        yield path
    finally:
        _remove(path)
