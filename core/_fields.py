"""The check every spec struct runs when it is built: each field holds what its annotation says.

msgspec checks types only when it decodes; a struct built in code takes anything. The spec's
structs call `check_fields` from `__post_init__`, so a field of the wrong kind is an
`InvalidSpec` naming it where it was written, not an `AttributeError` in the middle of a run.
Each field's expected kind is read once per class, so a check is a few `isinstance` calls.
"""

from __future__ import annotations

__all__ = ["check_fields", "describe"]

from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi

from ._errors import InvalidSpec

Check = Callable[[Any], bool]

_FIELDS: dict[type, tuple[tuple[str, mi.Type, Check], ...]] = {}


def describe(kind: mi.Type) -> str:
    """`kind` as the annotation that says it."""
    match kind:
        case mi.StructType(cls=cls):
            return cls.__name__
        case mi.VarTupleType(item_type=item):
            return f"tuple[{describe(item)}, ...]"
        case mi.DictType(key_type=key, value_type=value):
            return f"dict[{describe(key)}, {describe(value)}]"
        case mi.UnionType(types=types):
            return " | ".join(describe(t) for t in types)
        case mi.LiteralType(values=values):
            return " or ".join(repr(v) for v in values)
        case mi.NoneType():
            return "None"
        case mi.AnyType():
            return "Any"
    return type(kind).__name__.removesuffix("Type").lower()


def _anything(value: Any) -> bool:
    return True


def _compiled(kind: mi.Type) -> Check:
    """A test of whether a value is of `kind` (containers' items too; a struct checks its own
    fields), built once per field so that a check is a call or two."""
    match kind:
        case mi.NoneType():
            return lambda v: v is None
        case mi.BoolType():
            return lambda v: type(v) is bool
        case mi.IntType():
            return lambda v: type(v) is int or (isinstance(v, int) and type(v) is not bool)
        case mi.FloatType():
            return lambda v: (type(v) is float and v == v) or type(v) is int
        case mi.StrType():
            return lambda v: isinstance(v, str)
        case mi.LiteralType(values=values):
            return lambda v: type(v) in (str, int) and v in values
        case mi.StructType(cls=cls):
            return lambda v: isinstance(v, cls)
        case mi.UnionType(types=types):
            if len(types) == 2 and type(types[1]) is mi.NoneType:  # `T | None`, as most are
                check = _compiled(types[0])
                return lambda v: v is None or check(v)
            checks = tuple(_compiled(t) for t in types)
            return lambda v: any(c(v) for c in checks)
        case mi.VarTupleType(item_type=item):
            each = _compiled(item)
            if each is _anything:
                return lambda v: type(v) is tuple
            return lambda v: type(v) is tuple and all(map(each, v))
        case mi.DictType(key_type=key, value_type=item):
            key_ok, item_ok = _compiled(key), _compiled(item)
            return lambda v: type(v) is dict and all(key_ok(k) and item_ok(x) for k, x in v.items())
    return _anything  # Any, or a kind the spec does not use: msgspec checks it when it decodes


def _fits(value: Any, kind: mi.Type) -> bool:
    return _compiled(kind)(value)


def _hint(value: Any, kind: mi.Type) -> str:
    """How to give a value of `kind` instead of `value`."""
    kinds = kind.types if isinstance(kind, mi.UnionType) else (kind,)
    structs = [k.cls.__name__ for k in kinds if isinstance(k, mi.StructType)]
    if structs:
        return f": build one, {structs[0]}(...)"
    if isinstance(kind, mi.VarTupleType):
        return ": give a tuple, (item,) for one"
    return ""


def check_fields(struct: msgspec.Struct) -> None:
    """Raise `InvalidSpec` for the first field of `struct` that does not hold what its
    annotation says; a list given for a tuple becomes that tuple."""
    cls = type(struct)
    fields = _FIELDS.get(cls)
    if fields is None:
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        fields = _FIELDS[cls] = tuple((f.name, f.type, _compiled(f.type)) for f in info.fields)
    for field, kind, fits in fields:
        value = getattr(struct, field)
        if type(value) is list and type(kind) is mi.VarTupleType:
            value = tuple(value)
            msgspec.structs.force_setattr(struct, field, value)
        if fits(value):
            continue
        path = f"{cls.__name__}.{field}"
        if isinstance(kind, mi.VarTupleType) and type(value) is tuple:
            i, item = next((i, v) for i, v in enumerate(value) if not _fits(v, kind.item_type))
            path, value, kind = f"{path}[{i}]", item, kind.item_type
        elif isinstance(kind, mi.DictType) and type(value) is dict:
            k, item = next(
                (k, v)
                for k, v in value.items()
                if not (_fits(k, kind.key_type) and _fits(v, kind.value_type))
            )
            key_fits = _fits(k, kind.key_type)
            path, value = (f"{path}[{k!r}]", item) if key_fits else (path, k)
            kind = kind.value_type if key_fits else kind.key_type
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InvalidSpec(
            f"expected {describe(kind)}, got {type(value).__name__} {shown}{_hint(value, kind)}",
            field=path,
        )
