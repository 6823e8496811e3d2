"""What the three codecs share: typed fields, bounded numbers, kept values, argument text.

Fields follow one rule, whatever the format. `field` reads one the API always sends: absent,
it is `DecodeError(path, "missing")`; of another type (null included), `DecodeError(path,
"expected a string, got 3")`. `optional` reads one that may be absent or null, which gives its
default; another type is the same error. `path` names the place in the body (`content[1].id`).
`peek` is for a look ahead of those checks (a stream's early view of an item) or at a value only
passed along: one of another shape gives its default, never an error.

Numbers off the wire are bounded by what they stand for: an `index` may point at most one past
what the reply has so far (the next item), a `count` of tokens is between 0 and `MAX_COUNT`; so
no number, however large, makes the codecs allocate beyond the input's own size. A value a reply
keeps as it came (tool arguments, provider data) nests at most `MAX_DEPTH` levels (`kept`), so
whatever reads it later (the run's record, a tool, the next request) never runs out of stack.

Arguments text becomes a `ToolCall` by one rule too (`tool_call`), including a call cut off by
max tokens; each format only says which of its calls were cut.
"""

from __future__ import annotations

__all__ = [
    "MAX_COUNT",
    "MAX_DEPTH",
    "count",
    "expect",
    "field",
    "index",
    "json_object",
    "json_value",
    "kept",
    "optional",
    "peek",
    "reply",
    "salvage",
    "shallow",
    "shown",
    "too_deep",
    "tool_call",
    "tool_call_id",
]

import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from turnstile.core.decoding import decoded, shallow
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    Usage,
)

from ._errors import DecodeError
from ._text import heal

T = TypeVar("T")
D = TypeVar("D")

MAX_DEPTH = 100
"""How deep a value a reply keeps may nest: replies nest a dozen levels, tool arguments a few."""
MAX_COUNT = 2**53
"""The largest token count accepted (any larger is no count a model could have spent)."""

_KINDS = {dict: "an object", list: "an array", str: "a string", int: "an integer"}
_MISSING: Any = object()
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
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


def peek(obj: Any, key: str, kind: type[T], default: D) -> T | D:
    """`obj[key]` if `obj` is an object and that is a `kind`, else `default`."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, kind) else default


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
        raise DecodeError(where, f"expected {_KINDS[kind]}, got {shown(value)}")
    return value


def shown(value: Any, size: int = 40) -> str:
    """The start of `value` as JSON, for a message (a value nested too deep to write shows
    its first members' keys, 8 levels down, then "…")."""
    if not isinstance(value, dict | list) or shallow(value, 8):
        return json.dumps(value, ensure_ascii=False, default=repr)[:size]
    text = ""
    for _ in range(8):
        if isinstance(value, dict) and value:
            key, value = next(iter(value.items()))
            text += "{" + json.dumps(key, ensure_ascii=False, default=repr) + ": "
        elif isinstance(value, list) and value:
            text, value = text + "[", value[0]
    return text[:size] + "…"


def too_deep(call_id: str, name: str, value: Any, cut: bool) -> ToolCall:
    """A call whose arguments nest deeper than `MAX_DEPTH`: the start of them as text, so that
    the loop answers it with an error result instead of running it."""
    return ToolCall(call_id, name, {}, raw_arguments=shown(value, 200), complete=not cut)


def index(obj: Mapping[str, Any], key: str, path: str, limit: int) -> int:
    """`obj[key]`, an index into what the reply has so far, which may be at most `limit` (one
    past the last, for the next item)."""
    value = field(obj, key, int, path)
    if not 0 <= value <= limit:
        where = f"{path}.{key}" if path else key
        raise DecodeError(where, f"expected an index from 0 to {limit}, got {value}")
    return value


def count(obj: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    """`obj[key]`, a count of tokens: 0 to `MAX_COUNT`. With a `default`, the key may be absent
    or null."""
    if default is None:
        value = field(obj, key, int, path)
    else:
        value = optional(obj, key, int, path, default)
    if not 0 <= value <= MAX_COUNT:
        where = f"{path}.{key}" if path else key
        raise DecodeError(where, f"expected a count from 0 to 2**53, got {value}")
    return value


def kept(value: Any, path: str) -> Any:
    """A copy of `value`, a JSON value the reply keeps (a call's arguments, an item sent back
    verbatim), with its strings healed (`heal`), keys included. Its arrays and objects are new,
    so the caller's body may change without changing the reply.

    Raises `DecodeError` when it nests deeper than `MAX_DEPTH`, or holds a number JSON has no
    word for (`NaN`, `Infinity`: Python's parser reads them, but no run could write them down).
    """
    if not shallow(value, MAX_DEPTH):
        raise DecodeError(path, f"nested deeper than {MAX_DEPTH} levels")
    try:
        return _copied(value)
    except OverflowError:
        raise DecodeError(path, "holds NaN or infinity, not a finite number") from None


def _copied(value: Any) -> Any:
    if isinstance(value, str):
        return heal(value)
    if isinstance(value, dict):
        return {heal(k) if type(k) is str else k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if type(value) is float and not math.isfinite(value):
        raise OverflowError
    return value


def tool_call_id(obj: Mapping[str, Any], key: str, path: str) -> str:
    """A tool call's id, which its result must quote, so it may not be empty (healed text)."""
    value = field(obj, key, str, path)
    if not value:
        raise DecodeError(f"{path}.{key}" if path else key, "empty, so no result could quote it")
    return heal(value)


# -- the reply -------------------------------------------------------------------------------------


def reply(
    content: list[Part],
    stop: ModelStop,
    usage: Usage,
    raw_stop: str | None = None,
    body: Mapping[str, Any] | None = None,
) -> ModelResponse:
    """The neutral reply, as a run can keep it: its text healed (`heal`), and the reply's `id`
    and `model` when `body` (the reply's object) has them as strings. Calls that share an id
    are kept as the model sent them: the loop answers the repeats with an error result."""
    parts = [_healed(part) for part in content]
    named = [None if body is None else body.get(k) for k in ("id", "model")]
    id_, model = (heal(v) if type(v) is str and v else None for v in named)
    return ModelResponse(
        parts, stop, usage, None if raw_stop is None else heal(raw_stop), id_, model
    )


def _healed(part: Part) -> Part:
    """`part` with its own strings healed (arguments, provider data and opaque blocks are `kept`
    when read)."""
    if type(part) is Opaque:
        return part
    if type(part) is Text:
        text = heal(part.text)
        return part if text is part.text else msgspec.structs.replace(part, text=text)
    if type(part) is Thinking:
        text, signature = heal(part.text), part.signature and heal(part.signature)
        if text is part.text and signature is part.signature:
            return part
        return msgspec.structs.replace(part, text=text, signature=signature)
    call: ToolCall = part  # type: ignore[assignment]
    call_id, name = heal(call.id), heal(call.name)
    raw = call.raw_arguments and heal(call.raw_arguments)
    if call_id is call.id and name is call.name and raw is call.raw_arguments:
        return call
    return msgspec.structs.replace(call, id=call_id, name=name, raw_arguments=raw)


# -- tool calls ------------------------------------------------------------------------------------


def json_object(text: str) -> dict[str, Any] | None:
    """The members of the JSON object `text` holds, or None when it holds none (blank included),
    or when it nests deeper than `MAX_DEPTH`. Its strings are healed (`heal`): an escaped lone
    surrogate, which strict JSON parsers refuse, is U+FFFD as a raw one is."""
    try:
        value = decoded(msgspec.json.decode, heal(text), ValueError, MAX_DEPTH)
    except ValueError:
        if _SURROGATE_ESCAPE.search(text) is None:
            return None
        try:  # Python's parser takes the escape of a lone surrogate, and its strings heal
            value = _copied(decoded(_python_json, text, ValueError, MAX_DEPTH))
        except (ValueError, OverflowError):  # not JSON, too deep, not finite
            return None
    return value if type(value) is dict else None


def json_value(data: str | bytes, path: str) -> Any:
    """`data` read as JSON by Python's parser, which keeps an escaped lone surrogate (the half of
    a character a stream delta may end with) for the codecs to join or heal.

    Raises `DecodeError(path)` when it is not JSON, or nests deeper than the core reads
    (`turnstile.core`'s `MAX_DEPTH`).
    """

    def fail(reason: str) -> DecodeError:
        if reason.startswith("nested"):
            return DecodeError(path, reason)
        text = data if isinstance(data, str) else data[:80].decode("utf-8", errors="replace")
        return DecodeError(path, f"not JSON: {text[:80]!r}")

    return decoded(json.loads, data, fail)


def _python_json(text: str) -> Any:
    return json.loads(text, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def tool_call(
    call_id: str, name: str, text: str, *, cut: bool = False, provider_data: Any = None
) -> ToolCall:
    """The call whose arguments the model wrote as `text`.

    A JSON object is the arguments, and blank text means none; other text stays verbatim in
    `raw_arguments`, beside empty arguments. A `cut` call (the reply ended, at max tokens, while
    the model was writing it) is `complete=False`; unless its text is a whole object, it keeps
    that text in `raw_arguments` (blank included) and the members `salvage` proves whole.
    """
    text = heal(text)
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
