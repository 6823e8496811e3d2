"""Plain `logging`: a run's start, its retries, a tool's error (with the traceback the model
never sees) and its finish, under `turnstile.*`, from every executor; never the content."""

from __future__ import annotations

import logging

import pytest
import trio
from turnstile.core import Guards, LoopSpec, ModelError
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import ScriptedModel, sync
from turnstile.executors import aio as trio_executor

SECRET = "my card number is 4111"
SPEC = LoopSpec(guards=Guards(retry_backoff_s=0.001))


def lookup(query: str) -> str:
    """Look it up"""
    raise KeyError("no such entry")


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelError("overloaded", retryable=True, kind="overloaded"),
            ModelResponse([ToolCall("c1", "lookup", {"query": SECRET})], ModelStop.tool_use),
            ModelResponse([Text(f"I could not find {SECRET}")], ModelStop.end_turn),
        ]
    )


@pytest.mark.parametrize("executor", ["sync", "trio"])
def test_a_run_logs_its_start_retries_tool_errors_and_finish(
    executor: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnstile")
    if executor == "sync":
        sync.run(SPEC, SECRET, model=script(), tools=[lookup])
    else:
        trio.run(lambda: trio_executor.run(SPEC, SECRET, model=script(), tools=[lookup]))
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert [(name, level) for name, level, _ in records] == [
        ("turnstile.run", "INFO"),
        ("turnstile.run", "WARNING"),
        ("turnstile.tools", "WARNING"),
        ("turnstile.run", "INFO"),
        ("turnstile.run", "INFO"),
    ]
    messages = [m for _, _, m in records]
    assert messages[0] == "run started: 1 new messages, 1 tools given"
    assert messages[1].startswith(
        "model call model-1 failed (overloaded: overloaded); retry 1 as model-2 in "
    )
    assert messages[2] == "tool lookup raised KeyError"
    assert messages[3] == "tool call c1 (lookup) ended in an error result"
    assert messages[4] == "run finished: completed after 2 turns, 0 input and 0 output tokens"
    [tool_error] = [r for r in caplog.records if r.name == "turnstile.tools"]
    assert tool_error.exc_info is not None and tool_error.exc_info[0] is KeyError
    assert "raise KeyError" in caplog.text  # the traceback, which the model never sees
    assert "4111" not in caplog.text  # no prompt, argument, result or reply


def test_nothing_is_logged_below_the_level_asked_for(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="turnstile")
    sync.run(SPEC, "hi", model=script(), tools=[lookup])
    assert {r.levelname for r in caplog.records} == {"WARNING"}
