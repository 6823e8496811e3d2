"""Tools by import path: the sandboxed process imports its tool, it is never pickled.

A `Tool` is referred to as "module:qualified.name" of its function; a string in that form is
resolved here, in the host, to get the tool's spec.
"""

from __future__ import annotations

__all__ = ["ToolRef", "reference", "resolve"]

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

from turnstile.core._tools import Tool, ToolSpec, tool


class ToolRef(NamedTuple):
    path: str
    spec: ToolSpec


def resolve(path: str) -> Any:
    """The object at "package.module:attribute.path"."""
    module, colon, attribute = path.partition(":")
    if not colon or not module or not attribute:
        raise ValueError(f"a tool path looks like 'package.module:function', not {path!r}")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def _as_tool(found: Any) -> Tool:
    return found if isinstance(found, Tool) else tool(found)


def _path_of(t: Tool) -> str:
    """Where the sandboxed process will import `t` from, checked here by importing it."""
    fn = t.fn
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "<?>")
    path = f"{module}:{name}"
    if module in (None, "__main__") or "<" in name:
        raise ValueError(
            f"tool {t.name!r}: the sandbox imports tools by path; {path} cannot be imported "
            "(define the tool at a module's top level)"
        )
    try:
        again = _as_tool(resolve(path)).fn
    except (ImportError, AttributeError) as e:
        raise ValueError(f"tool {t.name!r}: cannot import {path}: {e}") from e
    if again is not fn:
        raise ValueError(f"tool {t.name!r}: {path} is a different function")
    return path


def reference(given: Tool | Callable[..., Any] | str) -> ToolRef:
    """The import path and spec of a tool given as a `Tool`, a function (wrapped with `@tool`)
    or a path string.

    Raises `ValueError` if a function cannot be found again by its module and name (a nested
    function, a lambda, or one defined in `__main__`)."""
    if isinstance(given, str):
        found = _as_tool(resolve(given))
        path = given
    else:
        found = _as_tool(given)
        path = _path_of(found)
    return ToolRef(path, found.spec)
