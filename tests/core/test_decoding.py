"""Reading JSON from outside is bounded: a depth bomb, a huge input or bytes that are not UTF-8
give the reader's own typed error (`CorruptState` for a dump), never `RecursionError` or
`MemoryError`; what nests no deeper than a run may carry reads, at any size."""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

import msgspec
import pytest
from turnstile.core import CorruptState, Loop, ToolReturned
from turnstile.core.decoding import decoded, shallow

from tests.core._drive import SPEC, deep, one_call_running


class Unreadable(Exception):
    """The error a test's reader raises."""


def read(data: bytes | str, depth: int = 256) -> Any:
    return decoded(msgspec.json.decode, data, Unreadable, depth)


# -- decoded and shallow -------------------------------------------------------------------------


def test_json_that_nests_as_deep_as_allowed_reads_and_one_level_more_fails() -> None:
    assert read("[" * 5 + "]" * 5, depth=5) == [[[[[]]]]]
    with pytest.raises(Unreadable, match="nested deeper than 5 levels"):
        read("[" * 6 + "]" * 6, depth=5)
    assert read('{"a": {"b": [1]}}', depth=3) == {"a": {"b": [1]}}
    with pytest.raises(Unreadable, match="nested deeper than 2 levels"):
        read('{"a": {"b": [1]}}', depth=2)


@pytest.mark.parametrize(
    "text",
    [
        '["' + "[" * 3000 + '"]',
        '{"' + "{" * 3000 + '": 1}',
        '["\\"' + "[" * 3000 + '"]',
        '["\\\\", "' + "[" * 3000 + '"]',
    ],
    ids=["in a string", "in a key", "after an escaped quote", "after an escaped backslash"],
)
def test_brackets_inside_strings_do_not_count_as_depth(text: str) -> None:
    assert read(text) == json.loads(text)


@pytest.mark.parametrize(
    "data",
    [b"[1, 2", b"\xff\xfe[]", b"", b"[" * 100_000 + b"]" * 100_000, "[" * 100_000],
    ids=["cut off", "not UTF-8", "empty", "a bomb", "a bomb as text"],
)
def test_what_is_not_json_or_nests_too_deep_is_the_reader_s_own_error(data: bytes | str) -> None:
    with pytest.raises(Unreadable):
        read(data)


def test_a_reader_of_any_decoder_gets_its_own_error_with_the_reason() -> None:
    assert decoded(json.loads, "[1]", Unreadable) == [1]
    with pytest.raises(Unreadable, match="Expecting value"):
        decoded(json.loads, "[1,]", Unreadable)
    with pytest.raises(Unreadable, match="Expected `int`"):
        decoded(msgspec.json.Decoder(list[int]).decode, b'["x"]', Unreadable)


def test_shallow_counts_the_levels_of_a_decoded_value() -> None:
    assert shallow(1, 0) and shallow({"a": 1}, 1) and not shallow({"a": 1}, 0)
    assert shallow(deep(list, 3), 3) and not shallow(deep(list, 4), 3)
    assert shallow({"a": [1], "b": {"c": 2}}, 2) and not shallow({"a": [1], "b": {"c": {}}}, 2)


def test_shallow_answers_for_a_value_deeper_than_the_interpreter_could_walk() -> None:
    levels = sys.getrecursionlimit() * 10
    assert not shallow(deep(dict, levels), 128)
    assert shallow(deep(dict, levels), levels)


# -- a dump is read through the same bounds ------------------------------------------------------


def _forged(state: bytes) -> bytes:
    """A dump of `state` under a checksum made to match, as damage could never make it."""
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(state), state)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 3000,
        b'{"a":' * 3000,
        b"[" * 3000 + b"]" * 3000,
        b'{"schema":2,"state":' + b'{"a":' * 3000,
        _forged(b'{"phase":' + b"[" * 3000 + b"1" + b"]" * 3000 + b"}"),
        "[" * 3000,
    ],
)
def test_a_dump_nested_thousands_deep_is_corrupt_state(data: bytes | str) -> None:
    with pytest.raises(CorruptState):
        Loop.load(SPEC, data)


def test_tool_arguments_nested_thousands_deep_in_a_dump_are_corrupt_state() -> None:
    d = one_call_running()
    state = json.loads(d.loop.dump())["state"]
    text = json.dumps(state).replace('{"n": 1}', '{"n": ' + "[" * 600 + "]" * 600 + "}")
    assert text != json.dumps(state)
    with pytest.raises(CorruptState, match="nested deeper"):
        Loop.load(SPEC, _forged(text.encode()))


def test_ten_megabytes_of_json_that_is_no_dump_is_corrupt_state() -> None:
    with pytest.raises(CorruptState):
        Loop.load(SPEC, b"[" + b"1," * 5_000_000 + b"1]")
    with pytest.raises(CorruptState):
        Loop.load(SPEC, b'{"schema":2,"state":"' + b"x" * 10_000_000 + b'"}')


def test_a_run_holding_ten_megabytes_dumps_and_loads() -> None:
    d = one_call_running()
    d.loop.send(ToolReturned("c1", "x" * 10_000_000, now=2.0))
    assert Loop.load(SPEC, d.loop.dump()).state == d.state
