"""`Loop.load` over damaged dumps: every byte-level change is `CorruptState` (the checksum), and
every change to the state itself that keeps a valid checksum is `CorruptState` or a state a loop
can be in, which is never stuck. None hangs."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from turnstile.core import CorruptState, Loop, LoopSpec

from tests.core._scripts import Run, check_consistent, drive, specs

HANG_S = 5.0  # for a dump under 10 KB: a guard against a path that never ends, not a speed target


def dumps_of_a_run(data: st.DataObject, spec: LoopSpec) -> list[bytes]:
    run = Run(spec)
    dumps: list[bytes] = []
    drive(
        data, run, steps=data.draw(st.integers(1, 8)), on_step=lambda r: dumps.append(r.loop.dump())
    )
    return dumps or [run.loop.dump()]


def loaded_in_time(spec: LoopSpec, data: bytes) -> Loop | None:
    started = time.perf_counter()
    try:
        loop: Loop | None = Loop.load(spec, data)
    except CorruptState:
        loop = None
    elapsed = time.perf_counter() - started
    assert len(data) > 10_000 or elapsed < HANG_S, f"{elapsed:.3f} s to load {len(data)} bytes"
    return loop


def mutated_bytes(data: st.DataObject, dump: bytes) -> bytes:
    i = data.draw(st.integers(0, len(dump) - 1))
    kind = data.draw(st.integers(0, 4))
    if kind == 0:
        return dump[:i] + bytes([dump[i] ^ (1 << data.draw(st.integers(0, 7)))]) + dump[i + 1 :]
    if kind == 1:
        return dump[:i] + dump[i + 1 :]
    if kind == 2:
        return dump[:i] + data.draw(st.sampled_from([b"0", b"{", b'"', b"null", b","])) + dump[i:]
    if kind == 3:
        return dump[:i]
    return dump[:i] + dump[i:][: data.draw(st.integers(1, 40))] * 2 + dump[i:]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), spec=specs())
def test_any_byte_changed_in_a_dump_is_corrupt_state(data: st.DataObject, spec: LoopSpec) -> None:
    dumps = dumps_of_a_run(data, spec)
    original = data.draw(st.sampled_from(dumps))
    changed = mutated_bytes(data, original)
    loop = loaded_in_time(spec, changed)
    if loop is not None:  # only what the state's bytes do not hold changed (spacing, the header)
        assert loop.state == Loop.load(spec, original).state


def _values(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, as a path of keys and indexes."""
    places = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            places += _values(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            places += _values(item, (*path, i))
    return places


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    return [*value[:head], _replaced(value[head], rest, new), *value[head + 1 :]]


REPLACEMENTS = [None, 0, -1, 1.5, "", "model-1", "done", "awaiting_tools", True, [], {}, "x" * 50]


@settings(max_examples=250, deadline=None)
@given(data=st.data(), spec=specs())
def test_a_state_changed_behind_a_valid_checksum_loads_only_if_a_loop_can_be_in_it(
    data: st.DataObject, spec: LoopSpec
) -> None:
    dump = json.loads(data.draw(st.sampled_from(dumps_of_a_run(data, spec))))
    places = [p for p in _values(dump["state"]) if p]
    place = data.draw(st.sampled_from(places))
    state = _replaced(dump["state"], place, data.draw(st.sampled_from(REPLACEMENTS)))
    body = json.dumps(state, separators=(",", ":")).encode()
    forged = b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(body), body)
    loop = loaded_in_time(spec, forged)
    if loop is not None:
        check_consistent(spec, loop, [])  # valid history, waits on what its phase says, not stuck
