"""Properties of the loop over random specs and random worlds (hypothesis).

Every world is played by `Run`, a strict executor that checks each step (see `_scripts.py`).
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Command,
    Denied,
    Finish,
    Guards,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    RunTool,
    StopReason,
    Tick,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.core.request import Purpose

from tests.core._scripts import (
    UNKNOWN_TOOL,
    Run,
    by_key,
    check_consistent,
    drive,
    odd_observation,
    refused_or_valid,
    specs,
)

OFF = Guards(  # every guard but the one under test switched off
    max_turns=None,
    deadline_s=None,
    context_window=None,
    max_repeated_calls=None,
    max_stalled_rounds=None,
    max_failed_rounds=None,
)


def feed(
    spec: LoopSpec, observations: list[Observation]
) -> tuple[list[list[Command]], list[bytes]]:
    """A fresh loop given the same start and observations: its commands and dumps per step."""
    loop = Loop(spec)
    commands = [loop.start("hi", 0.0)]
    dumps = [loop.dump()]
    for obs in observations:
        commands.append(loop.send(obs))
        dumps.append(loop.dump())
    return commands, dumps


@contextlib.contextmanager
def no_clock_or_randomness() -> Iterator[None]:
    def refuse(*args: object) -> None:
        raise AssertionError("the core read a clock or a random source")

    with contextlib.ExitStack() as stack:
        for module, name in [
            (time, "time"),
            (time, "time_ns"),
            (time, "monotonic"),
            (time, "monotonic_ns"),
            (time, "perf_counter"),
            (random, "random"),
            (random, "getrandbits"),
            (uuid, "uuid4"),
        ]:
            stack.enter_context(mock.patch.object(module, name, refuse))
        yield


@settings(max_examples=150, deadline=None)
@given(data=st.data(), spec=specs())
def test_random_worlds_keep_every_rule(data: st.DataObject, spec: LoopSpec) -> None:
    """Requests and ledger valid, tool commands only for runnable calls of the last reply,
    scheduling respected, results in call order, the loop waiting on exactly what it asked."""
    run = drive(data, Run(spec))
    run.check_finished()
    target(float(min(len(run.observations), 25)), label="observations, up to 25")


@settings(max_examples=60, deadline=None)
@given(data=st.data(), spec=specs())
def test_dump_and_load_at_any_step_change_nothing(data: st.DataObject, spec: LoopSpec) -> None:
    run = drive(data, Run(spec))
    n = len(run.observations)
    loads = data.draw(st.sets(st.integers(0, n), min_size=1, max_size=3))
    loop = Loop(spec)
    assert loop.start("hi", 0.0) == run.commands[0]
    for i in range(n + 1):
        if i in loads:
            before = loop.dump()
            resumed = Loop.load(spec, before)
            assert resumed.state == loop.state and resumed.dump() == before
            waited = run.snapshots[i] or [run.finish]
            assert by_key(resumed.outstanding_commands()) == by_key(waited)
            loop = resumed
        if i < n:
            assert loop.send(run.observations[i]) == run.commands[i + 1]
    assert loop.state == run.state
    assert loop.dump() == run.loop.dump()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), spec=specs())
def test_replaying_the_event_log_rebuilds_the_state(data: st.DataObject, spec: LoopSpec) -> None:
    def same_after_replay(run: Run) -> None:
        replayed = Loop.replay(spec, run.state.events)
        assert replayed.state == run.state
        assert replayed.dump() == run.loop.dump()
        assert replayed.outstanding_commands() == run.loop.outstanding_commands()

    run = drive(
        data,
        Run(spec),
        on_step=lambda r: data.draw(st.integers(0, 3)) == 0 and same_after_replay(r),
    )
    same_after_replay(run)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), spec=specs())
def test_any_observation_in_any_phase_is_refused_cleanly_or_accepted_validly(
    data: st.DataObject, spec: LoopSpec
) -> None:
    run = Run(spec)
    prefix = data.draw(st.integers(-1, 25))
    if prefix >= 0:
        drive(data, run, steps=prefix, cancel=False)
    loop = run.loop
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.integers(0, 9)) == 0:
            refused_or_valid(spec, loop, lambda: loop.start("again", 0.0))
        else:
            obs = odd_observation(data, spec, loop)
            refused_or_valid(spec, loop, lambda obs=obs: loop.send(obs))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), spec=specs())
def test_same_observations_give_same_commands(data: st.DataObject, spec: LoopSpec) -> None:
    run = drive(data, Run(spec))
    with no_clock_or_randomness():
        first = feed(spec, run.observations)
        second = feed(spec, run.observations)
    assert first[0] == second[0] == run.commands
    assert first[1] == second[1]
    assert first[1][-1] == run.loop.dump()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), retries=st.integers(0, 4))
def test_model_retries_are_counted_apart_from_turns(data: st.DataObject, retries: int) -> None:
    """Each streak of retryable failures may take `max_model_retries` retries; a reply resets the
    count; a streak one longer (or any fatal failure) ends the run with `model_error`."""
    guards = replace(OFF, max_model_retries=retries, finalize=data.draw(st.booleans()))
    spec = replace(data.draw(specs(guards=guards, stop_when=())), models=(), prices={})
    streaks = data.draw(st.lists(st.integers(0, retries), max_size=4))
    fatal_at = data.draw(st.one_of(st.none(), st.integers(0, retries)))
    run = Run(spec)
    run.start()

    def fail(retryable: bool) -> list[Command]:
        if data.draw(st.booleans()):
            assert run.send(Tick(now=run.now + 1.0)) == []
        return run.send(ModelFailed(run.waiting[0].id, "overloaded", retryable, now=run.now + 1.0))

    for turn, streak in enumerate(streaks):
        for _ in range(streak):
            [ask] = fail(True)
            assert type(ask) is CallModel
        call = ToolCall(f"c{turn}", UNKNOWN_TOOL, {})
        response = ModelResponse([call], ModelStop.tool_use)
        [ask] = run.send(ModelReplied(run.waiting[0].id, response, now=run.now + 1.0))
        assert type(ask) is CallModel
    last_streak = len(run.model_calls)
    tries = retries + 1 if fatal_at is None else fatal_at + 1
    for attempt in range(tries):
        commands = fail(fatal_at is None or attempt < fatal_at)
        if attempt < tries - 1:
            assert [type(c) for c in commands] == [CallModel]
    assert commands == [Finish(StopReason.model_error)]
    assert len(run.model_calls) - last_streak == tries - 1
    assert len(run.model_calls) == 1 + sum(streaks) + len(streaks) + tries - 1
    assert run.state.turns == len(streaks)
    run.check_finished()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 5), finalize=st.booleans())
def test_max_turns_counts_model_turns_only(data: st.DataObject, n: int, finalize: bool) -> None:
    """Failed attempts, tool rounds and the finalize call are not turns: exactly `n` are run."""
    guards = replace(OFF, max_turns=n, max_model_retries=2, finalize=finalize)
    spec = data.draw(specs(guards=guards, stop_when=()))
    names = [t.name for t in spec.tools if not t.finish] + [UNKNOWN_TOOL]
    run = Run(spec)
    run.start()
    fails = 0
    while run.finish is None:
        command = data.draw(st.sampled_from(run.waiting))
        now = run.now + 1.0
        if type(command) is CallModel:
            if fails < 2 and data.draw(st.booleans()):
                fails += 1
                run.send(ModelFailed(command.id, "overloaded", True, now=now))
                continue
            fails = 0
            if command.request.purpose is Purpose.finalize:
                response = ModelResponse([Text("final")], ModelStop.end_turn)
            else:
                calls = [
                    ToolCall(run.new_call_id(), data.draw(st.sampled_from(names)), {})
                    for _ in range(data.draw(st.integers(1, 2)))
                ]
                response = ModelResponse(calls, ModelStop.tool_use)
            run.send(ModelReplied(command.id, response, now=now))
        elif type(command) is RunTool:
            run.send(ToolReturned(command.id, "ok", data.draw(st.booleans()), now=now))
        elif data.draw(st.booleans()):
            run.send(Approved(command.id, now=now))
        else:
            run.send(Denied(command.id, now=now))
    assert run.finish == Finish(StopReason.max_turns, "final" if finalize else None)
    assert run.state.turns == n
    purposes = [c.request.purpose for c in run.model_calls]
    assert (Purpose.finalize in purposes) == finalize
    run.check_finished()


# -- core bugs the properties above found, each fixed; kept as regression tests ---------------


def test_a_paused_reply_and_its_continuation_keep_the_history_valid() -> None:
    spec = LoopSpec(tools=(ToolSpec("t"),))
    loop = Loop(spec)
    [ask] = loop.start("hi", 0.0)
    paused = ModelResponse([Text("part 1")], ModelStop.pause)
    [ask] = loop.send(ModelReplied(ask.id, paused, now=1.0))
    rest = ModelResponse([Text("part 2")], ModelStop.end_turn)
    assert refused_or_valid(spec, loop, lambda: loop.send(ModelReplied(ask.id, rest, now=2.0)))


@pytest.mark.parametrize("finalize", [True, False])
def test_a_reply_after_the_deadline_asks_no_approval(finalize: bool) -> None:
    spec = LoopSpec(
        tools=(ToolSpec("t", needs_approval=True),),
        guards=Guards(deadline_s=10.0, finalize=finalize),
    )
    loop = Loop(spec)
    [ask] = loop.start("hi", 0.0)
    late = ModelReplied(
        ask.id, ModelResponse([ToolCall("a", "t", {})], ModelStop.tool_use), now=11.0
    )
    commands = loop.send(late)
    assert not any(type(c) is AwaitApproval for c in commands), commands
    check_consistent(spec, loop, commands)


def test_a_reply_reusing_an_earlier_call_id_is_accepted_and_the_state_stays_loadable() -> None:
    """Ids need only be unique within a reply (some providers restart them every turn)."""
    spec = LoopSpec(tools=(ToolSpec("t"),))
    loop = Loop(spec)
    [ask] = loop.start("hi", 0.0)
    loop.send(
        ModelReplied(ask.id, ModelResponse([ToolCall("a", "t", {})], ModelStop.tool_use), now=1.0)
    )
    [ask] = loop.send(ToolReturned("a", "ok", now=2.0))
    again = ModelResponse([ToolCall("a", "t", {"x": 1})], ModelStop.tool_use)
    assert refused_or_valid(spec, loop, lambda: loop.send(ModelReplied(ask.id, again, now=3.0)))
