"""Salvaging what is certainly complete from a JSON object cut off mid-stream."""

from __future__ import annotations

__all__ = ["salvage"]

import json
from typing import Any

_SELF_DELIMITED = ('"', "]", "}", "true", "false", "null")


def salvage(text: str) -> dict[str, Any]:
    """The members of a JSON object cut short that are certainly complete; `{}` when none are.

    A member counts once a comma at the top level follows it, or when the text ends right after
    a value that cannot grow (a string, array, object or literal); a trailing number might have
    had more digits, so it is dropped.
    """
    if not text.lstrip().startswith("{"):
        return {}
    depth, in_string, escaped, comma = 0, False, False, -1
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            comma = i
    candidates = []
    if depth == 1 and not in_string and text.rstrip().endswith(_SELF_DELIMITED):
        candidates.append(text + "}")
    if comma > 0:
        candidates.append(text[:comma] + "}")
    for candidate in candidates:
        try:
            return json.loads(candidate)  # type: ignore[no-any-return]
        except ValueError:
            continue
    return {}
