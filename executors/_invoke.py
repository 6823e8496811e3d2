"""Running a `@tool`'s function: the core checks the model's arguments and renders the result;
calling the function, catching what it raises and logging the traceback happen here.

It imports only the core's tool module and `logging` only when a tool fails: a sandboxed call's
process loads this and little else.
"""

from __future__ import annotations

__all__ = ["ainvoke", "failure", "invoke", "logger", "sync_failure"]

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from turnstile.core._tools import Tool, ToolContext, ToolOutcome, render

if TYPE_CHECKING:
    import logging

Failure = Callable[[Tool, BaseException], ToolOutcome]


def logger(name: str) -> logging.Logger:
    """The logger `name` (under `turnstile`), once `turnstile`'s has its `NullHandler`: records
    go where the application sends them, and nowhere by default."""
    import logging

    root = logging.getLogger("turnstile")
    if not any(type(h) is logging.NullHandler for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)


def failure(tool: Tool, exc: BaseException) -> ToolOutcome:
    """What the model is told of `exc`, raised by `tool`: its type and message. Its traceback,
    which the model never sees, goes to the `turnstile.tools` logger."""
    logger("turnstile.tools").warning(
        "tool %s raised %s", tool.name, type(exc).__name__, exc_info=exc
    )
    detail = str(exc)
    return ToolOutcome(
        f"{tool.name} failed: {type(exc).__name__}" + (f": {detail}" if detail else ""), True
    )


def sync_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised by a sync call, is that call's own failure: any `Exception`, and
    asyncio's `CancelledError` (no one cancels a sync call; none exists before asyncio is
    imported). Anything else (KeyboardInterrupt, SystemExit) is the process's, not the call's."""
    if isinstance(exc, Exception):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _outcome(value: Any) -> ToolOutcome:
    """What a function returned, rendered; a `ToolOutcome` (a sub-agent's) as it is."""
    return value if isinstance(value, ToolOutcome) else ToolOutcome(render(value))


def invoke(
    tool: Tool,
    arguments: dict[str, Any],
    context: ToolContext | None = None,
    *,
    failed: Failure = failure,
) -> ToolOutcome:
    """Check the model's `arguments`, run `tool`'s (sync) function with them, and render what it
    returned or raised (`failed` says what the model is told of an exception), never raising
    for the tool's own failure."""
    checked = tool.check(arguments, context)
    if isinstance(checked, ToolOutcome):
        return checked
    try:
        return _outcome(tool.fn(**checked))
    except BaseException as e:  # no one cancels a sync function: a cancel is its own failure
        if not sync_failure(e):
            raise
        return failed(tool, e)


async def ainvoke(
    tool: Tool,
    arguments: dict[str, Any],
    context: ToolContext | None = None,
    *,
    failed: Failure = failure,
) -> ToolOutcome:
    """Like `invoke`, awaiting the function when it is async."""
    checked = tool.check(arguments, context)
    if isinstance(checked, ToolOutcome):
        return checked
    try:
        result = tool.fn(**checked)
        if isinstance(result, Awaitable):
            result = await result
        return _outcome(result)
    except Exception as e:
        return failed(tool, e)
