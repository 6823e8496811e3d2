"""The library's loggers, under `turnstile`: records go where the application sends them, and
nowhere by default (a `NullHandler`, as a library should).

`logging` is imported on first use: a sandboxed call's process, which imports the tool module
of the core and nothing else of it, pays for `logging` only if its tool fails.
"""

from __future__ import annotations

__all__ = ["logger"]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging


def logger(name: str) -> logging.Logger:
    """The logger `name` (under `turnstile`), once `turnstile`'s has its `NullHandler`."""
    import logging

    root = logging.getLogger("turnstile")
    if not any(type(h) is logging.NullHandler for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)
