"""Dumps carry a schema version; damaged or newer dumps fail clearly; replays rebuild the state."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    CorruptState,
    Finish,
    Guards,
    Loop,
    LoopSpec,
    LoopState,
    ModelReplied,
    StopReason,
)
from turnstile.core.conditions import HasToolCall, TextContains, TurnCountIs
from turnstile.core.request import Purpose

from tests.core._drive import Driver, call, reply, spec

SPEC = spec("t")


def finished_driver() -> Driver:
    d = Driver(SPEC)
    d.start("q")
    d.reply(call("a", "t", n=1), call("b", "t", n=2))
    d.result("b", "2")
    d.result("a", "1", is_error=True)
    d.reply("answer")
    return d


def test_dump_load_round_trip_and_replay() -> None:
    d = finished_driver()
    data = d.loop.dump()
    assert json.loads(data)["schema"] == 2
    assert Loop.load(SPEC, data).state == d.state
    replayed = Loop.replay(SPEC, d.state.events)
    assert replayed.state == d.state and replayed.dump() == data


def test_an_older_dump_without_newer_fields_still_loads() -> None:
    old = b'{"schema": 1, "state": {"phase": "idle"}}'
    assert Loop.load(SPEC, old).state == LoopState()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not a turnstile state dump"),
        (b"\x00\xff garbage", "not a turnstile state dump"),
        (b'{"state": {}}', "not a turnstile state dump"),
        (b'{"schema": 3, "state": {}}', "newer than this turnstile's 2"),
        (b'{"schema": 1, "state": {"turns": "many"}}', "damaged state dump"),
        (b'{"schema": 1, "state": {"phase": "dancing"}}', "unknown phase"),
        (
            b'{"schema": 1, "state": {"phase": "done", "messages": [{"type": "assistant",'
            b' "content": [{"type": "tool_call", "id": "x", "name": "t", "arguments": {}}]}]}}',
            "invalid history",
        ),
    ],
)
def test_corrupt_dumps_raise_corrupt_state_with_the_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptState, match=reason):
        Loop.load(SPEC, data)


def test_a_truncated_dump_is_corrupt() -> None:
    data = finished_driver().loop.dump()
    with pytest.raises(CorruptState):
        Loop.load(SPEC, data[: len(data) // 2])


def test_load_at_any_step_then_the_same_observations_give_the_same_run() -> None:
    whole = finished_driver()
    observations = whole.state.events[1:]
    for k in range(len(observations) + 1):
        loop = Loop(SPEC)
        loop.start("q", 0.0)
        commands = []
        for i, obs in enumerate(observations):
            if i == k:
                loop = Loop.load(SPEC, loop.dump())
            commands = loop.send(obs)
        assert loop.state == whole.state
        assert commands == whole.last


def test_a_schema_1_dump_finalizing_loads_and_finishes_for_its_reason() -> None:
    """Schema 1 kept the reason a run finalized for in `state.finalizing`, not `stop_reason`;
    a dump of schema 2 says so, so a turnstile that knows only schema 1 refuses it."""
    d = Driver(spec("t", guards=Guards(max_turns=1)))
    d.start("q")
    d.reply(call("a", "t"))
    [final] = d.result("a", "1")
    assert final.request.purpose is Purpose.finalize
    old = json.loads(d.loop.dump())
    assert old["schema"] == 2 and "finalizing" not in old["state"]
    old["schema"] = 1
    old["state"] |= {"stop_reason": "unknown", "finalizing": "max_turns"}
    loop = Loop.load(d.loop.spec, json.dumps(old))
    assert loop.state == d.state
    [done] = loop.send(ModelReplied(final.id, reply("summary"), now=9.0))
    assert done == Finish(StopReason.max_turns, "summary")
    old["state"]["finalizing"] = None
    with pytest.raises(CorruptState, match="stop reason unknown in phase finalizing"):
        Loop.load(d.loop.spec, json.dumps(old))


def test_a_spec_shipped_as_json_keeps_its_built_in_stop_conditions() -> None:
    """A spec is plain data beside a dump: its built-in conditions must come back callable."""
    conditions = (TurnCountIs(3), HasToolCall("done"), TextContains("bye"))
    shipped = msgspec.json.decode(
        msgspec.json.encode(LoopSpec(stop_when=conditions)), type=LoopSpec
    )
    assert shipped.stop_when == conditions
    with pytest.raises(msgspec.ValidationError, match="stop_when"):
        msgspec.json.decode(b'{"stop_when": [{"type": "when_pigs_fly"}]}', type=LoopSpec)


def _redumped(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """`data` with its state edited and its checksum made to match again."""
    dump = json.loads(data)
    edit(dump["state"])
    body = json.dumps(dump["state"], separators=(",", ":")).encode()
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(body), body)


def test_a_dump_asking_a_model_before_the_first_is_corrupt_state() -> None:
    s = spec("read", models=("a", "b"))
    loop = Loop(s)
    loop.start("go", 0.0)

    def edit(state: dict[str, Any]) -> None:
        state["model_index"] = -5

    with pytest.raises(CorruptState, match="model"):
        Loop.load(s, _redumped(loop.dump(), edit))
