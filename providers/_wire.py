"""What the three codecs share: typed fields, split surrogates, argument text, retryable kinds.

Fields follow one rule, whatever the format. `field` reads one the API always sends: absent,
it is `DecodeError(path, "missing")`; of another type (null included), `DecodeError(path,
"expected a string, got 3")`. `optional` reads one that may be absent or null, which gives its
default; another type is the same error. `path` names the place in the body (`content[1].id`).

Arguments text becomes a `ToolCall` by one rule too (`tool_call`), including a call cut off by
max tokens; each format only says which of its calls were cut.
"""

from __future__ import annotations

__all__ = [
    "RETRYABLE",
    "Pieces",
    "expect",
    "field",
    "heal",
    "json_object",
    "optional",
    "salvage",
    "tool_call",
    "tool_call_id",
]

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from turnstile.core import ToolCall

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
_SELF_DELIMITED = ('"', "]", "}", "true", "false", "null")


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


# -- tool calls ------------------------------------------------------------------------------------


def json_object(text: str) -> dict[str, Any] | None:
    """The members of the JSON object `text` holds, or None when it holds none (blank included)."""
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return value if type(value) is dict else None


def tool_call(
    call_id: str, name: str, text: str, *, cut: bool = False, provider_data: Any = None
) -> ToolCall:
    """The call whose arguments the model wrote as `text`.

    A JSON object is the arguments, and blank text means none; other text stays verbatim in
    `raw_arguments`, beside empty arguments. A `cut` call (the reply ended, at max tokens, while
    the model was writing it) is `complete=False`; unless its text is a whole object, it keeps
    that text in `raw_arguments` (blank included) and the members `salvage` proves whole.
    """
    value = json_object(text)
    if value is not None:
        return ToolCall(call_id, name, value, complete=not cut, provider_data=provider_data)
    if not cut and not text.strip():
        return ToolCall(call_id, name, {}, provider_data=provider_data)
    arguments = salvage(text) if cut else {}
    return ToolCall(
        call_id, name, arguments, raw_arguments=text, complete=not cut, provider_data=provider_data
    )


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
        members = json_object(candidate)  # the rule whole arguments are read by, NaN refused
        if members is not None:
            return members
    return {}
