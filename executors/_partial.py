"""`partial_json`: what a JSON text cut short already says, for an answer while it streams.

The value of the longest prefix that can be completed: strings still open are kept as far as
they came (an escape cut short left out), arrays and objects still open are closed, and what
cannot be known yet is left out: a number or `true`/`false`/`null` that may go on, a key still
open or waiting for its value. So each result is a prefix of the final value (its strings are
prefixes, its containers hold fewer members), and the whole text gives the whole value.
"""

from __future__ import annotations

__all__ = ["partial_json"]

import json
from typing import Any

_WS = " \t\n\r"


def partial_json(text: str) -> Any:
    """The value `text` (a JSON text, perhaps cut short) says so far; None before any value.
    Raises `ValueError` for text that is not the start of any JSON text."""
    try:
        return json.loads(text)
    except ValueError:
        pass  # cut short, or not JSON: which, the scan says
    completed = _completed(text)
    return None if completed is None else json.loads(completed)


def _completed(text: str) -> str | None:
    """`text` cut back to its last point of certainty and closed, or None when no value has
    begun; `ValueError` when it is not the start of a JSON text."""
    stack: list[str] = []  # "{" or "[" for each container still open
    expect_key = False  # in an object, before a key (or its end)
    cut = 0  # where the text is certain up to (a value ended, or a container opened)
    closing_at_cut = ""  # the closers needed at `cut`
    key_start = -1  # where the last key of an open object began (to drop a key alone)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _WS:
            i += 1
            continue
        if c == '"':
            end, closed = _string_end(text, i)
            if not closed:  # a string still open
                if stack and stack[-1] == "{" and expect_key:
                    return _close(text[:key_start], stack)  # a key alone: left out
                return _close(text[:i] + _whole_chars(text[i:end]) + '"', stack)
            if stack and stack[-1] == "{" and expect_key:
                key_start = _member_start(text, i)
                j = _skip_ws(text, end)
                if j >= n:
                    return _close(text[:key_start], stack)
                if text[j] != ":":
                    raise ValueError(f"expected ':' at {j}")
                j = _skip_ws(text, j + 1)
                if j >= n:
                    return _close(text[:key_start], stack)  # a key waiting for its value
                expect_key = False
                i = j
                continue
            i = end
            cut, closing_at_cut = i, _closers(stack)
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
            key_start = i + 1
            i += 1
            cut, closing_at_cut = i, _closers(stack)
            continue
        if c in "}]":
            if not stack or stack.pop() != ("{" if c == "}" else "["):
                raise ValueError(f"unexpected {c!r} at {i}")
            expect_key = False
            i += 1
            cut, closing_at_cut = i, _closers(stack)
            continue
        if c == ",":
            if not stack:
                raise ValueError(f"unexpected ',' at {i}")
            expect_key = stack[-1] == "{"
            key_start = i + 1
            i += 1
            continue
        end = _scalar_end(text, i)
        if end >= n:  # a number or a literal that may go on: left out
            return None if cut == 0 and not stack else _close(text[:cut], stack, closing_at_cut)
        json.loads(text[i:end])  # (a ValueError if it is no JSON scalar)
        i = end
        cut, closing_at_cut = i, _closers(stack)
    if not stack:
        return None if cut == 0 else text[:cut]
    return _close(text[:cut], stack, closing_at_cut)


def _close(prefix: str, stack: list[str], closers: str | None = None) -> str:
    """`prefix` with a trailing comma dropped and its open containers closed."""
    body = prefix.rstrip(_WS)
    if body.endswith(","):
        body = body[:-1]
    return body + (_closers(stack) if closers is None else closers)


def _closers(stack: list[str]) -> str:
    return "".join("}" if c == "{" else "]" for c in reversed(stack))


def _string_end(text: str, start: int) -> tuple[int, bool]:
    """Where the string opened at `start` ends (past its quote), and whether it is closed; an
    escape cut short is left out of an open one."""
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                return i, False
            if text[i + 1] == "u" and i + 6 > n:
                return i, False  # a \\uXXXX cut short
            i += 6 if text[i + 1] == "u" else 2
            continue
        if c == '"':
            return i + 1, True
        i += 1
    return n, False


def _whole_chars(kept: str) -> str:
    """An open string's text without a high surrogate's escape whose pair has not come yet."""
    tail = kept[-6:]
    if len(tail) == 6 and tail[:2].lower() == "\\u" and "d800" <= tail[2:].lower() <= "dbff":
        slashes = len(kept[:-6]) - len(kept[:-6].rstrip("\\"))
        if slashes % 2 == 0:  # (the backslash is an escape's, not an escaped one)
            return kept[:-6]
    return kept


def _scalar_end(text: str, start: int) -> int:
    i, n = start, len(text)
    while i < n and text[i] not in _WS and text[i] not in ",]}:":
        i += 1
    return i


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _member_start(text: str, key: int) -> int:
    """Where the member whose key opens at `key` begins: past the `{` or `,` before it."""
    j = key
    while j > 0 and text[j - 1] in _WS:
        j -= 1
    return j
