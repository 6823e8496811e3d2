"""Fallback models: a model failing past its retries gives way to the next, and the model that
answered is the one recorded and priced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import CallModel, Finish, Guards, ModelFailed, ModelReplied, Price, StopReason
from turnstile.core.messages import Usage

from tests.core._drive import Driver, call, reply, spec
from tests.core._scripts import (
    Run,
    specs,
)

NO_LIMITS = {
    "max_turns": None,
    "deadline_s": None,
    "max_repeated_calls": None,
    "max_stalled_rounds": None,
}


def test_a_model_failing_past_its_retries_gives_way_to_the_next() -> None:
    guards = Guards(max_model_retries=1, context_window=None, **NO_LIMITS)
    prices = {"big": Price(input=10.0, output=10.0), "small": Price(input=1.0, output=1.0)}
    d = Driver(spec("read", guards=guards, models=("big", "small"), prices=prices))
    [first] = d.start()
    assert first.request.model == "big"
    [retry] = d.send(ModelFailed(first.id, "overloaded", True, kind="overloaded", now=1.0))
    assert retry.request.model == "big" and retry.not_before is not None
    [fallback] = d.send(ModelFailed(retry.id, "overloaded", True, now=50.0))
    assert fallback.request.model == "small" and fallback.not_before is None
    d.now = 51.0
    d.reply(call("a", "read"), usage=Usage(1_000_000, 0))
    [ask] = d.result("a")
    assert ask.request.model == "small", "the run stays with the model that answers"
    [finish] = d.reply("done", usage=Usage(0, 0))
    assert finish.reason is StopReason.completed
    events = d.state.events
    assert [e.model for e in events if type(e) in (ModelFailed, ModelReplied)] == [
        "big", "big", "small", "small"
    ]  # fmt: skip
    assert d.state.cost == pytest.approx(1.0)  # priced as the model that answered
    # a final failure is not retried on another model; nor is the last model's
    d = Driver(spec("read", guards=guards, models=("big", "small")))
    [first] = d.start()
    [finish] = d.send(ModelFailed(first.id, "bad request", False, now=1.0))
    assert finish.reason is StopReason.model_error


def test_the_executor_s_word_on_the_model_is_kept() -> None:
    d = Driver(spec(models=("claude",)))
    [first] = d.start()
    d.send(ModelReplied(first.id, reply("hi"), model="claude-20250929", now=1.0))
    assert d.state.events[-1].model == "claude-20250929"


OFF = Guards(  # every guard but the one under test switched off
    max_turns=None,
    deadline_s=None,
    context_window=None,
    max_repeated_calls=None,
    max_stalled_rounds=None,
    max_failed_rounds=None,
)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), retries=st.integers(0, 3), models=st.integers(1, 3))
def test_each_fallback_model_gets_its_retries_and_answers_until_the_run_ends(
    data: st.DataObject, retries: int, models: int
) -> None:
    """Retryable failures past a model's retries move the run to the next model, at once and
    for good; past the last one's, the run ends with `model_error`."""
    names = tuple(f"m{i}" for i in range(models))
    guards = replace(OFF, max_model_retries=retries)
    spec = replace(data.draw(specs(guards=guards, stop_when=())), models=names, prices={})
    run = Run(spec)
    run.start()
    asked: list[str | None] = [run.model_calls[-1].request.model]
    for _ in range(models * (retries + 1)):
        commands = run.send(ModelFailed(run.waiting[0].id, "overloaded", True, now=run.now + 1))
        if type(commands[0]) is CallModel:
            asked.append(commands[0].request.model)
    assert commands == [Finish(StopReason.model_error)]
    assert asked == [m for m in names for _ in range(retries + 1)]
    failed = [e.model for e in run.state.events if type(e) is ModelFailed]
    assert failed == asked
    run.check_finished()
