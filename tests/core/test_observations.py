"""Observations, the facts an executor reports back, are frozen, tagged structs, each stamped
with its time: each kind's tag is its name in every event log and never changes, an event reads
back as it was written, and logs written before a field existed still read."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from turnstile.core import (
    Approved,
    Cancelled,
    Denied,
    Event,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, UserMessage

EVERY_EVENT = [
    Started(messages=[UserMessage("hi")], tools=(ToolSpec("t"),), now=0.0),
    ModelReplied("model-1", ModelResponse([Text("hi")], ModelStop.end_turn), now=1.0),
    ModelReplied("model-1", ModelResponse([Text("hi")], ModelStop.end_turn), model="m", now=1.0),
    ModelFailed("model-2", "overloaded", True, "overloaded_error", 3.0, "m", 529, now=2.0),
    ToolStarted("c1", now=3.0),
    ToolReturned("c1", [Text("a chart")], is_error=True, now=4.0),
    Approved("c2", now=5.0),
    Approved("c2", arguments={"path": "/tmp/y"}, now=5.0),
    Denied("c3", "too dangerous", now=6.0),
    Tick(now=7.0),
    Cancelled("user pressed ctrl-c", now=8.0),
    Resumed(now=9.0),
]


def read(data: bytes) -> Any:
    return msgspec.json.decode(data, type=Event)


def test_each_kind_of_observation_has_its_name_in_the_log() -> None:
    tags = {
        type(e).__name__: msgspec.json.decode(msgspec.json.encode(e))["type"] for e in EVERY_EVENT
    }
    assert tags == {
        "Started": "started",
        "ModelReplied": "model_replied",
        "ModelFailed": "model_failed",
        "ToolStarted": "tool_started",
        "ToolReturned": "tool_returned",
        "Approved": "approved",
        "Denied": "denied",
        "Tick": "tick",
        "Cancelled": "cancel",
        "Resumed": "resumed",
    }


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda e: type(e).__name__)
def test_an_event_reads_back_as_it_was_written(event: Observation) -> None:
    again = read(msgspec.json.encode(event))
    assert again == event and type(again) is type(event)


def test_an_observation_is_stamped_with_its_time_named() -> None:
    with pytest.raises(TypeError):
        Tick(7.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Approved("c1")  # type: ignore[call-arg]
    with pytest.raises(msgspec.ValidationError, match="missing required field `now`"):
        read(b'{"type":"tick"}')


def test_an_event_with_a_field_no_event_has_does_not_read() -> None:
    with pytest.raises(msgspec.ValidationError, match="unknown field `extra`"):
        read(b'{"type":"tick","now":1.0,"extra":1}')


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda e: type(e).__name__)
def test_an_observation_cannot_be_changed_once_made(event: Observation) -> None:
    with pytest.raises(AttributeError):
        event.now = 99.0  # type: ignore[misc]


def test_what_an_observation_leaves_out_writes_nothing_and_reads_as_its_default() -> None:
    failed = ModelFailed("model-1", "boom", now=1.0)
    assert msgspec.json.encode(failed) == (
        b'{"type":"model_failed","command_id":"model-1","message":"boom","now":1.0}'
    )
    assert (failed.retryable, failed.kind, failed.retry_after, failed.model, failed.status) == (
        False,
        "",
        None,
        None,
        None,
    )
    assert b'"model"' not in msgspec.json.encode(EVERY_EVENT[1])
    assert msgspec.json.encode(Approved("c2", now=5.0)) == (
        b'{"type":"approved","call_id":"c2","now":5.0}'  # as before edits could be sent
    )


def test_a_start_logged_before_runs_recorded_their_tools_still_reads() -> None:
    old = read(b'{"type":"started","messages":[{"type":"user","content":"hi"}],"now":0.0}')
    assert old == Started(messages=[UserMessage("hi")], now=0.0) and old.tools == ()
