"""Trajectory helpers, history assertions and transcript snapshots for users' agent tests."""

from __future__ import annotations

import pytest
from turnstile.core.messages import AssistantMessage, ToolCall, UserMessage
from turnstile.executors._demo import run_demo
from turnstile.executors.testing import (
    TranscriptExtension,
    assert_history_valid,
    calls,
    trajectory,
)


def test_trajectory_and_calls_in_order() -> None:
    run = run_demo()
    assert trajectory(run) == run.trajectory() == ["get_weather", "get_weather"]
    assert calls(run) == [("get_weather", {"city": "北京"}), ("get_weather", {"city": "上海"})]
    assert run.turns == 2


def test_assert_history_valid_lists_every_violation() -> None:
    assert_history_valid(run_demo())
    broken = [UserMessage("q"), AssistantMessage([ToolCall("a", "t", {}), ToolCall("b", "t", {})])]
    with pytest.raises(AssertionError) as e:
        assert_history_valid(broken)
    assert str(e.value).count("tool call has no result") == 2


def test_a_run_snapshots_as_its_transcript(snapshot) -> None:
    run = run_demo()
    assert run == snapshot
    assert run == snapshot(extension_class=TranscriptExtension)


def test_the_extension_refuses_what_it_cannot_render() -> None:
    with pytest.raises(TypeError, match="runs and loop states"):
        TranscriptExtension().serialize({"not": "a run"})
