"""What the three codecs share: typed fields, split surrogates, retryable error kinds.

Fields follow one rule, whatever the format. `field` reads one the API always sends: absent,
it is `DecodeError(path, "missing")`; of another type (null included), `DecodeError(path,
"expected a string, got 3")`. `optional` reads one that may be absent or null, which gives its
default; another type is the same error. `path` names the place in the body (`content[1].id`).
"""

from __future__ import annotations

__all__ = ["RETRYABLE", "Pieces", "expect", "field", "heal", "optional", "tool_call_id"]

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from ._errors import DecodeError

T = TypeVar("T")

RETRYABLE = frozenset(
    {
        # Anthropic's types for 429, 500, 504 and 529
        "rate_limit_error",
        "api_error",
        "timeout_error",
        "overloaded_error",
        # OpenAI's: the type of a 5xx, the code of a 429 for requests or tokens per minute
        # (`insufficient_quota`, also a 429, will not pass by itself), and the codes a failed
        # response or an error event carries for the same troubles
        "server_error",
        "rate_limit_exceeded",
        "server_is_overloaded",
        "service_unavailable_error",
        "vector_store_timeout",
    }
)
"""The error kinds (an error body's type or code) that asking again may cure."""

_KINDS = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
_MISSING: Any = object()
_SURROGATE = re.compile("[\ud800-\udfff]")


def field(obj: Mapping[str, Any], key: str, kind: type[T], path: str) -> T:
    """`obj[key]`, which the API always sends as a `kind`; `path` is where `obj` is."""
    value = obj.get(key, _MISSING)
    if type(value) is kind:
        return value
    return _checked(value, kind, path, key)


def optional(obj: Mapping[str, Any], key: str, kind: type[T], path: str, default: T) -> T:
    """`obj[key]` as a `kind`, or `default` when it is absent or null."""
    value = obj.get(key)
    if value is None:
        return default
    if type(value) is kind:
        return value
    return _checked(value, kind, path, key)


def expect(value: Any, kind: type[T], path: str) -> T:
    """`value` itself, which must be a `kind` (a body, an event, an array's item)."""
    if type(value) is kind:
        return value
    return _checked(value, kind, path, None)


def _checked(value: Any, kind: type[T], path: str, key: str | None) -> T:
    where = path if key is None else f"{path}.{key}" if path else key
    if value is _MISSING:
        raise DecodeError(where, "missing")
    wanted = Mapping if kind is dict else kind  # an object may be any mapping
    fits = isinstance(value, wanted) and not (kind is int and isinstance(value, bool))
    if not fits:
        shown = json.dumps(value, ensure_ascii=False, default=repr)[:40]
        raise DecodeError(where, f"expected {_KINDS[kind]}, got {shown}")
    return value


def tool_call_id(obj: Mapping[str, Any], key: str, path: str) -> str:
    """A tool call's id, which its result must quote, so it may not be empty."""
    value = field(obj, key, str, path)
    if not value:
        raise DecodeError(f"{path}.{key}" if path else key, "empty, so no result could quote it")
    return value


# -- text that arrives in pieces -------------------------------------------------------------------


def heal(text: str) -> str:
    """`text` with each pair of UTF-16 surrogates (a character whose halves arrived apart, each
    as a `\\uXXXX` escape) joined into that character; a lone half stays as it is."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


class Pieces:
    """Text arriving in fragments. A high surrogate ending a fragment waits for its low half, so
    a character split between the UTF-16 code units of its escape (`\\ud83d` + `\\ude00`) is
    joined again instead of showing as two lone code points."""

    __slots__ = ("_held", "_pieces")

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._held = ""

    def __bool__(self) -> bool:
        return bool(self._pieces or self._held)

    def add(self, fragment: str) -> str:
        """Take a fragment; return the part of it that can be shown now."""
        fragment, self._held = self._held + fragment, ""
        if fragment and "\ud800" <= fragment[-1] <= "\udbff":
            fragment, self._held = fragment[:-1], fragment[-1]
        fragment = heal(fragment)
        if fragment:
            self._pieces.append(fragment)
        return fragment

    def text(self) -> str:
        return "".join(self._pieces) + self._held
