"""Dumps carry a schema version; damaged or newer dumps fail clearly; replays rebuild the state."""

from __future__ import annotations

import json

import pytest
from turnstile.core import CorruptState, Loop, LoopState

from tests.core._drive import Driver, call, spec

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
    assert json.loads(data)["schema"] == 1
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
        (b'{"schema": 2, "state": {}}', "newer than this turnstile's 1"),
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
