"""`Toolbox`: tool implementations by name, run with checked arguments."""

from __future__ import annotations

__all__ = ["Toolbox", "as_runner", "caller"]

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core import Event, RunTool, Tool, ToolContext, ToolOutcome, ToolSpec, tool

from ._invoke import invoke
from ._protocols import ToolRunner, takes


class Toolbox:
    """Holds `Tool`s (plain functions are wrapped with `@tool`); `run` never raises."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else tool(t)
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def _missing(self, name: str) -> ToolOutcome:
        return ToolOutcome(f"tool {name!r} has no implementation in this run", True)

    def run(
        self, name: str, arguments: dict[str, Any], *, context: ToolContext | None = None
    ) -> ToolOutcome:
        t = self._tools.get(name)
        return self._missing(name) if t is None else invoke(t, arguments, context)


def as_runner(tools: ToolRunner | Iterable[Tool | Callable[..., Any]]) -> ToolRunner:
    """A runner as given (a `Toolbox`, a sandbox...), or a `Toolbox` of the tools given."""
    if isinstance(tools, ToolRunner):
        return tools
    if hasattr(tools, "run"):
        raise TypeError(
            f"{type(tools).__name__} has run() but no specs: a ToolRunner also says which tools "
            "it runs, as `specs` (a sequence of ToolSpec)"
        )
    return Toolbox(tools)


def caller(
    runner: ToolRunner,
    deps: Any = None,
    history: Callable[[], Sequence[Event]] | None = None,
) -> Callable[[RunTool], ToolOutcome]:
    """How to run a call on `runner`: with its `ToolContext` (the call's id and `deps`), unless
    the runner's `run` takes none (one written before calls had a context); and the run's
    events so far (`history()`) to a runner whose `run` names a `history` parameter (a
    sandbox's workspace is the run's; one taking `**kwargs` may pass them on to a runner
    that takes none). A runner that says it cannot take `deps` (`check_deps` raising) stops the
    run here, before it starts."""
    check = getattr(runner, "check_deps", None)
    if deps is not None and check is not None:
        check(deps)
    run: Callable[..., ToolOutcome] = runner.run
    if history is not None and takes(run, "history", named=True):
        return lambda c: run(
            c.name, c.arguments, context=ToolContext(c.id, deps), history=history()
        )
    if takes(run, "context"):
        return lambda c: run(c.name, c.arguments, context=ToolContext(c.id, deps))
    return lambda c: run(c.name, c.arguments)
