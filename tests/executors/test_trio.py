"""The async executor (`turnstile.executors.aio`) under trio, on trio's mocked clock: what
test_aio (both backends) does not cover: resumes, approvers, the deadline's tick, prompts."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from turnstile.core import (
    Guards,
    Loop,
    LoopSpec,
    ModelError,
    ModelReplied,
    ModelRequest,
    StopReason,
    Tick,
    tool,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Run, ScriptedModel, sync
from turnstile.executors import aio as trio_executor
from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather

from .test_aio import batch, returned


def in_trio(fn: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def test_resume_from_a_dump_under_trio() -> None:
    @tool(needs_approval=True)
    async def launch(n: int) -> str:
        """Needs a human."""
        return "launched"

    spec = LoopSpec(tools=(launch.spec,))
    model = batch("launch", 1)
    first = in_trio(lambda: trio_executor.run(spec, "go", model=model, tools=[launch]))
    assert first.finish is None and [c.id for c in first.waiting] == ["c0"]
    loop = Loop.load(spec, first.loop.dump())

    async def approve(command: object) -> bool:
        await trio.sleep(0)
        return True

    run = in_trio(
        lambda: trio_executor.run(spec, model=model, tools=[launch], loop=loop, approve=approve)
    )
    assert run.stop_reason is StopReason.completed
    assert run.messages[2].results[0].content == "launched"


def test_same_decisions_as_the_sync_executor() -> None:
    def events(run: Run) -> list[object]:
        return [type(e).__name__ + str(getattr(e, "call_id", "")) for e in run.state.events]

    by_sync = sync.run(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather])
    # the real clock: MockClock's autojump sees a worker thread as idle time and would jump
    # straight to the deadline tick
    by_trio = trio.run(
        lambda: trio_executor.run(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather])
    )
    assert by_trio.messages == by_sync.messages
    assert sorted(events(by_trio)) == sorted(events(by_sync))
    assert [type(e) for e in by_trio.state.events if type(e) is ModelReplied] == [ModelReplied] * 2


def test_a_model_failure_keeps_its_kind_and_the_wait_the_provider_asked_for() -> None:
    limited = ModelError("slow down", kind="rate_limit_error", retry_after=1.5)
    run = in_trio(lambda: trio_executor.run(LoopSpec(), "hi", model=ScriptedModel([limited])))
    failed = run.state.events[-1]
    assert (failed.kind, failed.retry_after) == ("rate_limit_error", 1.5)


def test_a_function_is_not_a_model_client() -> None:
    def reply(request: ModelRequest) -> ModelResponse:
        return ModelResponse([Text("hi")], ModelStop.end_turn, Usage(1, 1))

    with pytest.raises(TypeError, match=r"AsyncModelClient.*ModelClient.*function reply"):
        in_trio(lambda: trio_executor.run(LoopSpec(), "hi", model=reply))  # type: ignore[arg-type]


def test_a_sync_approver_waits_in_a_thread_while_other_calls_run() -> None:
    back = threading.Event()

    @tool(needs_approval=True)
    async def launch(n: int) -> str:
        """Needs a human."""
        return "launched"

    @tool
    async def quick(n: int) -> str:
        """Takes 100 ms."""
        await trio.sleep(0.1)
        back.set()
        return "quick"

    def human(command: object) -> bool:
        return back.wait(timeout=3)  # answers once the other call is back

    calls = [ToolCall("a", "launch", {"n": 1}), ToolCall("q", "quick", {"n": 2})]
    model = ScriptedModel(
        [
            ModelResponse(calls, ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("ok")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )
    # no deadline: MockClock takes the waiting thread for idle time and would jump to it
    spec = LoopSpec(tools=(launch.spec, quick.spec), guards=Guards(deadline_s=None))
    run = in_trio(
        lambda: trio_executor.run(spec, "go", model=model, tools=[launch, quick], approve=human)
    )
    assert [r.content for r in run.messages[2].results] == ["launched", "quick"]
    assert dict(returned(run))["q"] == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("before_the_reply", "expected_ticks"),
    [
        (None, [5.0]),  # no deadline yet: one is armed once there is
        (2.0, [5.0]),  # the deadline moved later: the earlier one is not waited for
    ],
)
def test_the_deadline_tick_follows_the_loop_after_every_step(
    monkeypatch: pytest.MonkeyPatch, before_the_reply: float | None, expected_ticks: list[float]
) -> None:
    """The loop's next deadline moves as the run goes (time spent waiting only for a person does
    not count); here it is `before_the_reply` until the model has replied, then the guard's."""
    guard = Loop.next_deadline

    def moving(loop: Loop) -> float | None:
        return before_the_reply if loop.state.phase == "awaiting_model" else guard(loop)

    monkeypatch.setattr(Loop, "next_deadline", moving)

    @tool
    async def slow(n: int) -> str:
        """Takes a minute."""
        await trio.sleep(60)
        return "late"

    model = batch("slow", 1)
    model._script.insert(1, ModelResponse([Text("gave up")], ModelStop.end_turn, Usage(1, 1)))
    spec = LoopSpec(guards=Guards(deadline_s=5.0))
    run = in_trio(lambda: trio_executor.run(spec, "go", model=model, tools=[slow]))
    assert run.stop_reason is StopReason.deadline
    assert [e.now for e in run.state.events if type(e) is Tick] == pytest.approx(expected_ticks)


def test_a_prompt_starts_an_idle_loop_and_a_waiting_loop_refuses_one() -> None:
    idle = Loop(LoopSpec())
    run = in_trio(lambda: trio_executor.run(LoopSpec(), "rest", model=batch("nap"), loop=idle))
    assert run.stop_reason is StopReason.completed

    @tool(needs_approval=True)
    async def launch(n: int) -> str:
        """Needs a human."""
        return "launched"

    spec = LoopSpec(tools=(launch.spec,))
    first = in_trio(lambda: trio_executor.run(spec, "go", model=batch("launch", 1), tools=[launch]))
    with pytest.raises(ValueError, match="resume it without a prompt"):
        in_trio(
            lambda: trio_executor.run(
                spec, "again", model=ScriptedModel([]), tools=[launch], loop=first.loop
            )
        )


def test_a_slow_approver_does_not_use_up_the_run_s_deadline() -> None:
    @tool(needs_approval=True)
    async def write_file(n: int) -> str:
        """Needs a human."""
        return "written"

    async def human(command: object) -> bool:
        await trio.sleep(700)  # longer than the whole deadline
        return True

    spec = LoopSpec(tools=(write_file.spec,), guards=Guards(deadline_s=600.0))
    model = batch("write_file", 1)
    run = in_trio(
        lambda: trio_executor.run(spec, "go", model=model, tools=[write_file], approve=human)
    )
    assert run.messages[2].results[0].content == "written"
    assert run.stop_reason is StopReason.completed
    assert "✓ approved write_file (c0)" in run.transcript()
