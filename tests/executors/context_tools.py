"""Tools that ask for their `ToolContext`, importable by the sandbox's processes."""

from __future__ import annotations

import msgspec
from turnstile.core import ToolContext


class User(msgspec.Struct, frozen=True):
    id: int
    name: str


def whoami(greeting: str, context: ToolContext[User]) -> str:
    """Greets the run's user, by the deps the caller gave the run."""
    assert isinstance(context.deps, User)
    return f"{greeting}, {context.deps.name} ({context.deps.id}), in {context.call_id}"


def what_deps(context: ToolContext) -> str:
    """Says what deps it got, untyped."""
    return repr(context.deps)
