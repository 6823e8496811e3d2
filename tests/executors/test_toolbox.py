"""How executors hand calls to a tool runner: a runner whose `run` takes `history` gets the
run's events so far with each call (a sandbox's workspace is the run's); others never do."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import pytest
import trio
from turnstile.core import Event, LoopSpec, ToolContext, ToolOutcome, ToolSpec
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, Toolbox, aio, sync


class Recorder:
    """A runner that records, per call, the kinds of the events it was given."""

    specs = (ToolSpec("t"),)

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def run(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        context: ToolContext | None = None,
        history: Sequence[Event] = (),
    ) -> ToolOutcome:
        self.seen.append([type(e).__name__ for e in history])
        return ToolOutcome("ok")


def model() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse([ToolCall("c1", "t", {})], ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([ToolCall("c2", "t", {})], ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )


@pytest.mark.parametrize("executor", ["sync", "aio"])
def test_a_runner_that_takes_history_gets_the_runs_events_so_far_with_each_call(
    executor: str,
) -> None:
    runner = Recorder()
    if executor == "sync":
        sync.run(LoopSpec(), "go", model=model(), tools=runner)
    else:
        trio.run(partial(aio.run, LoopSpec(), "go", model=model(), tools=runner))
    first = ["Started", "ModelReplied", "ToolStarted"]
    assert runner.seen == [first, [*first, "ToolReturned", "ModelReplied", "ToolStarted"]]


def test_a_runner_taking_any_keywords_is_not_handed_a_history_it_may_pass_on() -> None:
    class Passes(Recorder):
        def run(self, name: str, arguments: dict[str, Any], **given: Any) -> ToolOutcome:
            return Toolbox([]).run(name, arguments, **given)

    run = sync.run(LoopSpec(), "go", model=model(), tools=Passes())
    assert run.messages[2].results[0].content == "tool 't' has no implementation in this run"
