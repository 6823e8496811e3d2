"""Optional dependencies: a missing one is named in one line that says which extra installs it."""

from __future__ import annotations

__all__ = ["MissingExtra", "installed", "missing_extra", "required"]

import importlib
from types import ModuleType

from turnstile.core import TurnstileError


class MissingExtra(TurnstileError, ImportError):
    """A part of turnstile needs a package that is not installed; the message says what to
    install (`pip install 'turnstile[extra]'`)."""


def missing_extra(
    error: ModuleNotFoundError, extra: str | tuple[str, ...], *, needed_by: str
) -> ImportError:
    """The error to raise for `error`: a `MissingExtra` naming `extra` (the smallest extra that
    installs what is missing; or extras that each do, as a tuple) when the missing module is one
    that extra installs (`extra`'s own name, e.g. "trio", or a package it pulls in), else
    `error` itself, so a broken install of something else is not misreported."""
    installs = {
        "anthropic": ("anthropic", "httpx2"),
        "openai": ("openai", "httpx2"),
        "aio": ("anyio",),
        "trio": ("trio", "anyio"),
        "temporal": ("temporalio",),
        "otel": ("opentelemetry",),
        "cli": ("rich",),
        "pytest": ("pytest", "syrupy"),
    }
    extras = (extra,) if isinstance(extra, str) else extra
    missing = (error.name or "").partition(".")[0]
    if not any(missing in installs.get(e, (e,)) for e in extras):
        return error
    install = " or ".join(f"'turnstile[{e}]'" for e in extras)
    return MissingExtra(f"{needed_by} needs the {missing} package: pip install {install}")


def installed(name: str) -> ModuleType | None:
    """The package `name`, imported, or None when it is not installed. A package that is there
    but fails to import (a dependency of its own missing) raises: that is not "absent"."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:
            raise
        return None


def required(name: str, extra: str, *, needed_by: str) -> ModuleType:
    """The package `name`, imported; a `MissingExtra` naming `extra` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise missing_extra(err, extra, needed_by=needed_by) from None
