"""The weather agent against a recorded conversation: no network, no key, exact requests."""

from __future__ import annotations

import pytest
from turnstile.core import StopReason
from turnstile.executors.testing import assert_history_valid

from examples.weather_agent import agent as my_agent


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_weather_agent(turnstile_client, snapshot) -> None:
    run = my_agent.run("北京和上海哪个更暖和?", model=turnstile_client)
    assert run.trajectory() == ["get_weather", "get_weather"]
    assert_history_valid(run)
    assert run == snapshot


@pytest.mark.turnstile_trace("fixtures/weather.anthropic.json")
def test_weather_agent_asks_for_both_cities_at_once(turnstile_client) -> None:
    run = my_agent.run("北京和上海哪个更暖和?", model=turnstile_client)
    assert run.calls() == [("get_weather", {"city": "北京"}), ("get_weather", {"city": "上海"})]
    assert run.turns == 2
    assert run.stop_reason is StopReason.completed
    assert "上海更暖和" in run.transcript()
