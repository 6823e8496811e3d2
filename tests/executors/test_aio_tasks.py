"""How the async executor's tasks end: a cancel it sends holds, as anyio's and trio's do, so work
that catches it and awaits more is cancelled again (time is `run_async`'s, virtual; a run called
off is not tested so: the outer scope's cancel keeps the event loop busy, and virtual time would
never pass)."""

from __future__ import annotations

import contextvars

import anyio
import pytest
import trio
from turnstile.core import Guards, LoopSpec, StopReason, Tool, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, aio
from turnstile.executors._tasks import _Alarms
from turnstile.executors.testing import run_async


@tool
async def stubborn(n: int) -> str:
    """Waits a minute; cancelled, it cleans up for another minute before giving up."""
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        await anyio.sleep(60)
        raise
    return "done"


def _calls(n: int, name: str = "stubborn") -> ScriptedModel:
    calls = [ToolCall(f"c{i}", name, {"n": i}) for i in range(n)]
    return ScriptedModel(
        [
            ModelResponse(calls, ModelStop.tool_use, Usage(10, 5)),
            ModelResponse([Text("rested")], ModelStop.end_turn, Usage(10, 5)),
        ]
    )


def _past_the_deadline(backend: str, n: int, slow: Tool) -> tuple[StopReason | None, float]:
    """A run of `n` calls of `slow` at once, with a deadline of 5 s: how it stopped, and when."""

    async def main() -> tuple[StopReason | None, float]:
        spec = LoopSpec(guards=Guards(deadline_s=5))
        run = await aio.run(spec, "go", model=_calls(n, slow.name), tools=[slow])
        return run.stop_reason, anyio.current_time()

    return run_async(main, backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("n", [1, 2])
def test_work_the_deadline_gave_up_on_is_cancelled_again_when_it_catches_the_cancel(
    backend: str, n: int
) -> None:
    stop, ended = _past_the_deadline(backend, n, stubborn)
    assert stop is StopReason.deadline
    assert ended < 60


@tool
async def tidy(n: int) -> str:
    """Waits a minute; cancelled, it tidies up for a second under a shield, then gives up."""
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.sleep(1)
            TIDIED.append(n)
        raise
    return "done"


TIDIED: list[int] = []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("n", [1, 2])
def test_work_the_deadline_gave_up_on_finishes_what_it_shields_from_the_cancel(
    backend: str, n: int
) -> None:
    TIDIED.clear()
    stop, ended = _past_the_deadline(backend, n, tidy)
    assert stop is StopReason.deadline
    assert sorted(TIDIED) == list(range(n))
    assert 6 <= ended < 60


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_error_stepping_the_loop_at_its_deadline_is_raised_from_the_run(backend: str) -> None:
    def on_event(event: object) -> None:
        if type(event).__name__ == "Tick":
            raise OSError("the disk is full")

    async def main() -> None:
        spec = LoopSpec(guards=Guards(deadline_s=5))
        await aio.run(spec, "go", model=_calls(1), tools=[stubborn], on_event=on_event)

    with pytest.raises(BaseExceptionGroup) as raised:
        run_async(main, backend=backend)  # type: ignore[arg-type]
    assert raised.group_contains(OSError, match="the disk is full")


def test_runs_under_trio_share_one_task_for_their_deadlines() -> None:
    seen: list[int] = []

    @tool
    async def look(n: int) -> str:
        """Counts the trio run's system tasks that serve alarms."""
        system = trio.lowlevel.current_root_task().child_nurseries
        names = [t.name for nursery in system for t in nursery.child_tasks]
        seen.append(names.count("turnstile alarms"))
        return "seen"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(
                    lambda: aio.run(LoopSpec(), "go", model=_calls(1, "look"), tools=[look])
                )

    trio.run(main)
    assert seen == [1, 1, 1]


def test_the_alarms_forget_cancelled_timers_as_asyncio_does() -> None:
    async def main() -> int:
        alarms = _Alarms.here()
        for timer in [alarms.call_later(60 + i, lambda: None) for i in range(200)]:
            timer.cancel()
        alarms.call_later(1, lambda: None)
        return len(alarms.heap)

    assert trio.run(main) <= 65


SEEN_AT_THE_DEADLINE: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_step_at_the_deadline_sees_the_context_of_the_run(backend: str) -> None:
    seen: list[str] = []

    def on_event(event: object) -> None:
        if type(event).__name__ == "Tick":
            seen.append(SEEN_AT_THE_DEADLINE.get())

    async def main() -> None:
        SEEN_AT_THE_DEADLINE.set("the caller's")
        spec = LoopSpec(guards=Guards(deadline_s=5))
        await aio.run(spec, "go", model=_calls(1), tools=[stubborn], on_event=on_event)

    run_async(main, backend=backend)  # type: ignore[arg-type]
    assert seen == ["the caller's"]
