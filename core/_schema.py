"""Whether a value fits a JSON schema: the keywords tools' schemas use (msgspec's, MCP servers'),
checked without a dependency. Used where a person, not the model, hands the loop arguments (an
approval's edit), which must fit the tool's `parameters` before the call runs with them.

Annotations (`description`, `title`, `format`, `default`, ...) say nothing about validity and
are passed over, as JSON Schema has it; so are keywords this module does not know.
"""

from __future__ import annotations

__all__ = ["schema_problem"]

import math
import re
from collections.abc import Callable
from typing import Any

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),  # as msgspec has it
}
Found = tuple[str, str] | None
"""Where a value breaks its schema (a path, "" for the value itself) and how; None if it fits."""


def schema_problem(value: Any, schema: Any) -> Found:
    """Where `value` first breaks `schema` (a path like `items[2].name`, "" for the value
    itself) and how; None if it fits. A schema that cannot be read (a pattern that is no
    regular expression, a `$ref` it does not hold) fits nothing."""
    return _problem(value, schema, "", schema, 0)


def _problem(value: Any, schema: Any, path: str, root: Any, depth: int) -> Found:
    if schema is True or schema == {}:
        return None
    if schema is False:
        return path, "no value is allowed here"
    if not isinstance(schema, dict) or depth > 64:
        return path, "the schema cannot be read"
    for check in _CHECKS:
        found = check(value, schema, path, root, depth + 1)
        if found is not None:
            return found
    return None


def _ref(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    ref = s.get("$ref")
    if ref is None:
        return None
    target = root
    if not isinstance(ref, str) or not ref.startswith("#"):
        return path, f"the schema refers to {ref!r}, which cannot be followed"
    for key in filter(None, ref[1:].split("/")):
        key = key.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or key not in target:
            return path, f"the schema refers to {ref!r}, which it does not hold"
        target = target[key]
    return _problem(value, target, path, root, depth)


def _kind(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    kinds = s.get("type")
    if kinds is not None:
        named = [kinds] if isinstance(kinds, str) else kinds
        if not any(_TYPES.get(k, lambda _: False)(value) for k in named):
            return path, f"expected {' or '.join(map(str, named))}, got {_json_type(value)}"
    if "enum" in s and not any(_same(value, v) for v in s["enum"]):
        return path, f"expected one of {s['enum']!r}, got {value!r}"
    if "const" in s and not _same(value, s["const"]):
        return path, f"expected {s['const']!r}, got {value!r}"
    return None


def _combined(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    for sub in s.get("allOf", ()):
        found = _problem(value, sub, path, root, depth)
        if found is not None:
            return found
    for key in ("anyOf", "oneOf"):
        if key in s:
            fits = sum(_problem(value, sub, path, root, depth) is None for sub in s[key])
            if fits == 0:
                return path, f"fits none of the {len(s[key])} schemas it may take ({key})"
            if key == "oneOf" and fits > 1:
                return path, f"fits {fits} of the schemas it must fit one of (oneOf)"
    if "not" in s and _problem(value, s["not"], path, root, depth) is None:
        return path, "fits the schema it must not (not)"
    if "if" in s:
        branch = "then" if _problem(value, s["if"], path, root, depth) is None else "else"
        if branch in s:
            return _problem(value, s[branch], path, root, depth)
    return None


def _object(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    if not isinstance(value, dict):
        return None
    for name in s.get("required", ()):
        if name not in value:
            return _at(path, name), "a required field is missing"
    properties = s.get("properties", {})
    patterns = s.get("patternProperties", {})
    extra = s.get("additionalProperties", True)
    for name, item in value.items():
        where = _at(path, name)
        matched = [sub for p, sub in patterns.items() if _matches(p, name)]
        if name in properties:
            matched.append(properties[name])
        elif not matched:
            matched.append(extra)
            if extra is False:
                return where, "an unknown field"
        for sub in matched:
            found = _problem(item, sub, where, root, depth)
            if found is not None:
                return found
    for needed, names in s.get("dependentRequired", {}).items():
        if needed in value and any(n not in value for n in names):
            return path, f"with {needed!r}, it needs {names!r}"
    return _sized(len(value), s, path, "minProperties", "maxProperties", "fields")


def _array(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    if not isinstance(value, list):
        return None
    prefix = s.get("prefixItems", [])
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else s.get("items", True)
        found = _problem(item, sub, f"{path}[{i}]", root, depth)
        if found is not None:
            return found
    if s.get("uniqueItems") and any(_same(a, b) for i, a in enumerate(value) for b in value[:i]):
        return path, "holds the same item twice"
    if "contains" in s:
        if all(_problem(v, s["contains"], path, root, depth) for v in value):
            return path, "holds no item the schema asks for (contains)"
    return _sized(len(value), s, path, "minItems", "maxItems", "items")


def _string(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    if not isinstance(value, str):
        return None
    if "pattern" in s and not _matches(s["pattern"], value):
        return path, f"does not match the pattern {s['pattern']!r}"
    return _sized(len(value), s, path, "minLength", "maxLength", "characters")


def _number(value: Any, s: dict[str, Any], path: str, root: Any, depth: int) -> Found:
    if not _TYPES["number"](value):
        return None
    for key, ok in (
        ("minimum", lambda b: value >= b),
        ("maximum", lambda b: value <= b),
        ("exclusiveMinimum", lambda b: value > b),
        ("exclusiveMaximum", lambda b: value < b),
        ("multipleOf", lambda b: math.isclose(value / b, round(value / b))),
    ):
        if key in s and not ok(s[key]):
            return path, f"{value!r} breaks {key} {s[key]!r}"
    return None


_CHECKS = (_ref, _kind, _combined, _object, _array, _string, _number)


def _sized(n: int, s: dict[str, Any], path: str, low: str, high: str, what: str) -> Any:
    if n < s.get(low, 0):
        return path, f"has {n} {what}, fewer than {s[low]} ({low})"
    if high in s and n > s[high]:
        return path, f"has {n} {what}, more than {s[high]} ({high})"
    return None


def _matches(pattern: Any, text: str) -> bool:
    """Whether `text` matches `pattern` (a pattern that is no regular expression: never)."""
    try:
        return re.search(pattern, text) is not None
    except (re.error, TypeError):
        return False


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
