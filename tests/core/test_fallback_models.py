"""Fallback models: a model failing past its retries gives way to the next, and the model that
answered is the one recorded and priced."""

from __future__ import annotations

import pytest
from turnstile.core import (
    Guards,
    ModelFailed,
    ModelReplied,
    Price,
    StopReason,
    Usage,
)

from tests.core._drive import Driver, call, reply, spec

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
