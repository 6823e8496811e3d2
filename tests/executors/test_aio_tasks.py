"""How the async executor's tasks end: a cancel it sends holds, as anyio's and trio's do, so work
that catches it and awaits more is cancelled again (time is `run_async`'s, virtual; a run called
off is not tested so: the outer scope's cancel keeps the event loop busy, and virtual time would
never pass)."""

from __future__ import annotations

import anyio
import pytest
from turnstile.core import Guards, LoopSpec, StopReason, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, aio
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


def _calls(n: int) -> ScriptedModel:
    calls = [ToolCall(f"c{i}", "stubborn", {"n": i}) for i in range(n)]
    return ScriptedModel(
        [
            ModelResponse(calls, ModelStop.tool_use, Usage(10, 5)),
            ModelResponse([Text("rested")], ModelStop.end_turn, Usage(10, 5)),
        ]
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("n", [1, 2])
def test_work_the_deadline_gave_up_on_is_cancelled_again_when_it_catches_the_cancel(
    backend: str, n: int
) -> None:
    async def main() -> tuple[StopReason | None, float]:
        spec = LoopSpec(guards=Guards(deadline_s=5))
        run = await aio.run(spec, "go", model=_calls(n), tools=[stubborn])
        return run.stop_reason, anyio.current_time()

    stop, ended = run_async(main, backend=backend)  # type: ignore[arg-type]
    assert stop is StopReason.deadline
    assert ended < 60
