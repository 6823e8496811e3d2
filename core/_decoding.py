"""Reading JSON from outside: every way in that takes bytes (a dump, a journal's record, a
trace, a model's reply) decodes through `decoded`, so a depth bomb, a huge input or text that
is not UTF-8 gives the caller's own typed error, never `RecursionError` or `MemoryError`.

Depth is bounded so that what reads well here also reads, writes and reads again from any
stack depth: a document nests at most `MAX_DEPTH` levels, and a value a run carries (an
observation, tool arguments) at most `VALUE_DEPTH`, which leaves room for the levels a dump
or a trace wraps it in. Size is bounded only by memory: a 10 MB reply or dump decodes.
Depth is counted on the bytes at C speed (strings taken out, then innermost levels peeled off
while there are many runs of brackets, the rest walked): 10 MB of ordinary JSON or of a bomb
takes a fraction of a second.
"""

from __future__ import annotations

__all__ = ["MAX_DEPTH", "VALUE_DEPTH", "decoded", "nests_deeper", "shallow"]

import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_DEPTH = 256
"""How deep a JSON document turnstile reads may nest (a run's own dump nests about ten levels
around the values it carries)."""
VALUE_DEPTH = 128
"""How deep an observation may nest as JSON: deeper tool arguments are not run (the model gets
an error result), anything else deeper is refused."""

_OPENING = bytes.maketrans(b"{}", b"[]")  # depth is all that is counted, not which kind
_NOT_MARK = bytes(b for b in range(256) if b not in b'[]{}"')
_RUNS = re.compile(rb"\[+|\]+")
_RUNS_WALKED = 4096


def decoded(
    decode: Callable[[Any], T],
    data: bytes | str,
    fail: Callable[[str], Exception],
    depth: int = MAX_DEPTH,
) -> T:
    """`decode(data)`, or the error `fail(reason)` when `data` nests deeper than `depth`
    levels, is not JSON of the type `decode` reads (`msgspec`'s or `json`'s decoder), is not
    UTF-8 text, or is too large to hold in memory."""
    if nests_deeper(data, depth):
        raise fail(f"nested deeper than {depth} levels")
    try:
        return decode(data)
    except ValueError as e:  # json's, msgspec's (a ValueError from 0.21 on), UnicodeError
        raise fail(str(e)) from None
    except RecursionError:  # a malformed nest the count above cannot see
        raise fail(f"nested deeper than {depth} levels") from None
    except MemoryError:
        raise fail("too large to decode in the memory there is") from None


def nests_deeper(data: bytes | str, depth: int) -> bool:
    """Whether the JSON text `data` nests more than `depth` levels of arrays and objects (its
    strings aside), counted without recursion and without decoding it."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= depth:
        return False
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # no quote is escaped now
    marks = unescaped.translate(_OPENING, _NOT_MARK).replace(b'""', b"")  # strings of brackets
    brackets = b"".join(marks.split(b'"')[::2])  # less what is inside strings
    while depth and brackets.count(b"[]") + brackets.count(b"][") > _RUNS_WALKED:
        brackets, depth = brackets.replace(b"[]", b""), depth - 1  # every innermost level off
    level = 0  # few runs of brackets are left: walk them
    for run in _RUNS.finditer(brackets):
        size = run.end() - run.start()
        level += size if brackets[run.start()] == 0x5B else -size
        if level > depth:
            return True
    return False


def shallow(value: Any, depth: int) -> bool:
    """Whether the decoded value `value` nests at most `depth` levels of lists and dicts
    (walked without recursion, so a value of any depth can be asked about)."""
    stack = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if level == depth:
            return False
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return True
