"""Where a request's server tools stand among its own tools, the same rule in every format."""

from __future__ import annotations

__all__ = ["placed"]

import copy
from collections.abc import Sequence
from typing import Any

from turnstile.core.request import ServerTool


def placed(
    own: list[dict[str, Any]], server: Sequence[ServerTool], format: str
) -> list[dict[str, Any]]:
    """`own` (the request's tools as `format` writes them) with each server tool of `format`
    (a copy of its definition) at its `position`, in order of position, or else after them all,
    in the order given; a position past the end is the end."""
    ours = [t for t in server if t.format == format]
    tools = list(own)
    for tool in sorted((t for t in ours if t.position is not None), key=_position):
        tools.insert(_position(tool), copy.deepcopy(tool.definition))
    return tools + [copy.deepcopy(t.definition) for t in ours if t.position is None]


def _position(tool: ServerTool) -> int:
    return tool.position or 0
