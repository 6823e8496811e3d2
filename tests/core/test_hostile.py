"""Hostile and careless observations, at any point of any run: each is refused with a typed
error that leaves the state byte for byte as it was, or taken as a valid step after which the
state dumps and loads back equal and waits on something (or is done)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import (
    Approved,
    Cancelled,
    Denied,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    Tick,
    ToolReturned,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, Thinking, ToolCall, Usage

from tests.core._scripts import Run, drive, odd_observation, refused_or_valid, specs, world_step

NOT_FINITE = [math.nan, math.inf, -math.inf]
WRONG = [None, 3, 2.5, True, "text", b"bytes", {"k": "v"}, ["a"], ("t",), object()]
TEXTS = ["lone \ud83d half", "\udcff", "ok \ud83d\ude00 pair", "x" * 200_000, "", "\x00nul"]


def odd_text(data: st.DataObject) -> Any:
    return data.draw(st.sampled_from(TEXTS + WRONG[:3]))


def odd_arguments(data: st.DataObject) -> Any:
    value = data.draw(st.sampled_from([*NOT_FINITE, "\ud800", 1, "ok", [1, math.nan]]))
    return data.draw(st.sampled_from([{"x": value}, {value: 1} if type(value) is str else {}, []]))


def spoiled_reply(data: st.DataObject, response: ModelResponse) -> Any:
    """A reply with one of its parts, or the reply itself, of the wrong shape or content."""
    kind = data.draw(st.integers(0, 6))
    if kind == 0:
        return data.draw(st.sampled_from(WRONG))
    if kind == 1:
        return replace(response, content=data.draw(st.sampled_from(WRONG)))
    if kind == 2:
        return replace(response, stop=data.draw(st.sampled_from(["over", None, 7])))
    if kind == 3:
        return replace(response, usage=Usage(data.draw(st.sampled_from([-1, 2**70, None]))))
    parts: list[Any] = list(response.content)
    if kind == 4:
        parts.append(data.draw(st.sampled_from([Text(odd_text(data)), Thinking(odd_text(data))])))
    elif kind == 5:
        parts.append(ToolCall(data.draw(st.sampled_from(["dup", "\udc80", 5])), "t0", {}))
        parts.append(ToolCall("dup", "t0", odd_arguments(data)))
    else:
        parts.append({"type": "text", "text": "a dict, not a Text"})
    return replace(response, content=parts)


def spoiled(data: st.DataObject, obs: Observation, last: float) -> Any:
    """`obs` with one field made hostile: a wrong type, text that is not Unicode, a number that
    is not finite, time going back, or a reply spoiled inside."""
    kind = data.draw(st.integers(0, 5))
    if kind == 0:
        return replace(obs, now=data.draw(st.sampled_from([*NOT_FINITE, last - 1.0, "1"])))
    if kind == 1 and type(obs) is ModelReplied:
        return replace(obs, response=spoiled_reply(data, obs.response))
    if kind == 2 and type(obs) is ToolReturned:
        return replace(obs, content=odd_text(data), is_error=data.draw(st.sampled_from([1, None])))
    if kind == 3 and type(obs) is ModelFailed:
        return replace(obs, retry_after=data.draw(st.sampled_from([*NOT_FINITE, "soon", -1.0])))
    if kind == 4 and type(obs) in (ToolReturned, Approved, Denied):
        return replace(obs, call_id=data.draw(st.sampled_from(["ghost", "\udc80", 7, None])))
    if kind == 5 and type(obs) in (Denied, Cancelled, ModelFailed):
        field = "message" if type(obs) is ModelFailed else "reason"
        return replace(obs, **{field: odd_text(data)})
    return data.draw(st.sampled_from([obs, {"type": "tick", "now": last}, None, Tick]))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), spec=specs())
def test_hostile_observations_are_refused_cleanly_or_taken_validly(
    data: st.DataObject, spec: LoopSpec
) -> None:
    run = Run(spec)
    drive(data, run, steps=data.draw(st.integers(0, 12)), cancel=False)
    loop = run.loop
    for _ in range(data.draw(st.integers(1, 6))):
        last = loop.state.events[-1].now if loop.state.events else 0.0
        if loop.state.phase == "done" or data.draw(st.booleans()):
            base = odd_observation(data, spec, loop)
        else:
            base = world_step(data, run)
        obs = spoiled(data, base, last) if data.draw(st.integers(0, 3)) else base
        refused_or_valid(spec, loop, lambda obs=obs: loop.send(obs))
        run.waiting = loop.outstanding_commands()  # the world answers what the loop waits on
        run.now = loop.state.events[-1].now if loop.state.events else 0.0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), spec=specs())
def test_a_hostile_conversation_to_start_from_is_refused_cleanly_or_started_validly(
    data: st.DataObject, spec: LoopSpec
) -> None:
    run = Run(spec)
    prompt = data.draw(
        st.sampled_from([*TEXTS, [], [None], ["hi"], 5, [ModelResponse([], ModelStop.end_turn)]])
    )
    now = data.draw(st.sampled_from([0.0, *NOT_FINITE, "0"]))
    refused_or_valid(spec, run.loop, lambda: run.loop.start(prompt, now))  # type: ignore[arg-type]
