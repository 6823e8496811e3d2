"""`invoke`: a tool's function run with checked arguments; what it returns or raises becomes a
model-readable outcome, its traceback a log record."""

from __future__ import annotations

import asyncio
import logging

import pytest
from turnstile.core import ToolContext, ToolOutcome, tool
from turnstile.executors import ainvoke, invoke


@tool
def locate(city: str, units: str = "metric") -> dict[str, object]:
    """Find a city on the map."""
    if city == "nowhere":
        raise KeyError("city")
    return {"city": city, "units": units}


def test_valid_arguments_are_converted_and_the_result_rendered_as_json() -> None:
    assert invoke(locate, {"city": "北京"}) == ToolOutcome('{"city":"北京","units":"metric"}')


def test_invalid_arguments_are_refused_before_the_function_runs() -> None:
    assert invoke(locate, {}) == ToolOutcome(
        "invalid arguments for locate: Object missing required field `city`", True
    )


def test_an_exception_becomes_an_error_result_and_its_traceback_a_log_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="turnstile.tools")
    out = invoke(locate, {"city": "nowhere"})
    assert out == ToolOutcome("locate failed: KeyError: 'city'", True)
    assert "Traceback" not in out.content
    [record] = caplog.records
    assert (record.name, record.getMessage()) == ("turnstile.tools", "tool locate raised KeyError")
    assert record.exc_info is not None and record.exc_info[0] is KeyError


def test_a_sync_functions_cancel_is_its_own_failure_but_an_interrupt_is_the_processes() -> None:
    @tool
    def stops(how: str) -> str:
        """Raise what it is told to."""
        raise asyncio.CancelledError() if how == "cancel" else KeyboardInterrupt()

    assert invoke(stops, {"how": "cancel"}) == ToolOutcome("stops failed: CancelledError", True)
    with pytest.raises(KeyboardInterrupt):
        invoke(stops, {"how": "interrupt"})


def test_a_context_is_passed_to_a_tool_that_asks_for_it() -> None:
    @tool
    def whoami(context: ToolContext) -> str:
        """Say the call's id."""
        return context.call_id

    assert invoke(whoami, {}, ToolContext("c1")) == ToolOutcome("c1")
    assert invoke(whoami, {}).is_error


def test_async_tools_are_awaited_and_sync_ones_run_by_ainvoke_too() -> None:
    @tool
    async def slow(n: int) -> int:
        """Async tool."""
        await asyncio.sleep(0)
        return n * 2

    assert asyncio.run(ainvoke(slow, {"n": 2})) == ToolOutcome("4")
    assert asyncio.run(ainvoke(slow, {"n": "x"})).is_error
    assert asyncio.run(ainvoke(locate, {"city": "nowhere"})).is_error


def test_the_turnstile_logger_sends_nothing_anywhere_by_default() -> None:
    handlers = logging.getLogger("turnstile").handlers
    assert any(type(h) is logging.NullHandler for h in handlers)


def test_a_function_that_returns_a_tool_outcome_gives_it_as_it_is() -> None:
    @tool
    def refuses(city: str) -> ToolOutcome:
        """Say no, as an error the model reads."""
        return ToolOutcome(f"no weather for {city}", True)

    @tool
    async def arefuses(city: str) -> ToolOutcome:
        """Say no, awaited."""
        return ToolOutcome(f"no weather for {city}", True)

    assert invoke(refuses, {"city": "Oz"}) == ToolOutcome("no weather for Oz", True)
    assert asyncio.run(ainvoke(arefuses, {"city": "Oz"})) == ToolOutcome("no weather for Oz", True)
