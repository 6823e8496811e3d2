"""The launcher's own code, compiled once by the host and handed to every launcher in a memfd.

A launcher is a fresh interpreter: importing the sandbox's modules and the core's from source
would compile each of them again in every cold call wherever no bytecode cache can be written
(`PYTHONDONTWRITEBYTECODE`, a read-only install) — more time than the interpreter's own start.
The image holds their code objects (marshal, the format of `.pyc` files; it comes from the host,
never from a call); the launcher imports them from it, with the files' names for tracebacks.
"""

from __future__ import annotations

__all__ = ["image_fd"]

import fcntl
import importlib.util
import marshal
import os
import pkgutil
import threading
from importlib.machinery import SourceFileLoader, SourcelessFileLoader

from ._wire import write_all

_PACKAGES = ("turnstile.core", "turnstile.executors.sandbox")
"""Whose modules a launcher and a call's processes import (a tool importing the core gets it
from the image too). The packages are listed for their paths; their `__init__`s are not run."""


_LOADERS = {".py": SourceFileLoader, ".pyc": SourcelessFileLoader}
"""Read from the files themselves, whoever imported them here (pytest rewrites a plugin's)."""


def _modules() -> dict[str, tuple[str, bool, object]]:
    """Each module's name: (file, whether it is a package, code)."""
    found: dict[str, tuple[str, bool, object]] = {}
    names = ["turnstile.executors", "turnstile.executors._invoke", *_PACKAGES]
    for package in _PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None
        found_in = spec.submodule_search_locations
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(found_in)]
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        loader = _LOADERS.get(os.path.splitext(spec.origin)[1])
        if loader is not None:  # else (an extension module, say) it is imported as usual
            code = loader(name, spec.origin).get_code(name)
            found[name] = (spec.origin, spec.submodule_search_locations is not None, code)
    return found


_made: list[int] = []
_lock = threading.Lock()


def image_fd() -> int:
    """A sealed memfd holding the marshalled modules, made once per process and passed to
    every launcher (which reads it, never writes: the seals forbid it)."""
    with _lock:
        if not _made:
            _made.append(_sealed(marshal.dumps(_modules())))
        return _made[0]


def _sealed(data: bytes) -> int:
    fd = os.memfd_create("turnstile-launcher", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    write_all(fd, data)
    seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd
