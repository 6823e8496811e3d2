"""A parent whose model calls a sub-agent twice, each child calling a tool that counts its runs
in a side file (the parent's `deps`): the world of the sub-agent tests, and a process that runs
it, killed with SIGKILL right after the child journals' `kill_at`-th record
(`python -m tests.executors.subagent_world KIND FOLDER KILL_AT`)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from turnstile.core import LoopSpec, ModelRequest, Price, ToolContext, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults, Usage
from turnstile.executors import Journal, Run, ScriptedModel, aio, as_tool, sync
from turnstile.executors.testing import run_async

PRICES = {"m": Price(input=1.0, output=2.0)}
CHILD = LoopSpec(system="child", models=("m",), prices=PRICES)
PARENT = LoopSpec(system="parent", models=("m",), prices=PRICES)
KINDS = ("sync", "asyncio", "trio")


@tool
def note(text: str, context: ToolContext[str]) -> str:
    """Note `text` down (once: it is not replay-safe)."""
    with open(context.deps, "a") as side:
        side.write(text + "\n")
    return f"noted {text}"


research = as_tool(CHILD, name="research", description="Research a question.", tools=[note])


def reply(request: ModelRequest) -> ModelResponse:
    results = [r for m in request.messages if type(m) is ToolResults for r in m.results]
    if request.system == "parent":
        if not results:
            calls = [ToolCall(f"a{i}", "research", {"prompt": q}) for i, q in ((1, "x"), (2, "y"))]
            return ModelResponse(calls, ModelStop.tool_use, Usage(1_000, 100))
        found = " / ".join(str(r.content) for r in results)
        return ModelResponse([Text(f"found: {found}")], ModelStop.end_turn, Usage(2_000, 50))
    asked = request.messages[0].content  # the child's prompt
    if not results:
        return ModelResponse([ToolCall("n1", "note", {"text": asked})], ModelStop.tool_use,
                             Usage(300, 30))  # fmt: skip
    return ModelResponse([Text(f"{asked}: {results[0].content}")], ModelStop.end_turn,
                         Usage(400, 40))  # fmt: skip


def model() -> ScriptedModel:
    return ScriptedModel(reply)


def execute(kind: str, folder: Path, spec: LoopSpec = PARENT, **options: Any) -> Run:
    """Run (or resume) the parent in `folder` under `kind` (sync, asyncio, trio)."""
    given = {"model": model(), "tools": [research], "deps": str(folder / "side"), **options}
    if kind == "sync":
        return sync.run(spec, "go", **given)
    backend: Any = kind
    return run_async(lambda: aio.run(spec, "go", **given), backend=backend)


@tool(needs_approval=True)
def publish(text: str, context: ToolContext[str]) -> str:
    """Publish `text`, once a person approves (once: it is not replay-safe)."""
    with open(context.deps, "a") as side:
        side.write(f"published:{text}\n")
    return f"published {text}"


careful = as_tool(
    CHILD, name="research", description="Research, then publish.", tools=[note, publish]
)


def careful_reply(request: ModelRequest) -> ModelResponse:
    """The parent's replies as in `reply`; each child notes its prompt, publishes it (which a
    person approves), then answers."""
    results = [r for m in request.messages if type(m) is ToolResults for r in m.results]
    if request.system == "parent" or len(results) != 1:
        return reply(request)
    asked = request.messages[0].content
    return ModelResponse([ToolCall("p1", "publish", {"text": asked})], ModelStop.tool_use,
                         Usage(300, 30))  # fmt: skip


def execute_careful(kind: str, folder: Path, **options: Any) -> Run:
    """Run (or resume) the parent of `careful` children in `folder` under `kind`."""
    given = {"tools": [careful], "deps": str(folder / "side"), **options}
    return execute(kind, folder, model=ScriptedModel(careful_reply), **given)


def main(kind: str, folder: str, kill_at: str) -> None:
    """Run the parent, journaled, and kill this process after the children's record `kill_at`."""
    at, parent, written = int(kill_at), Path(folder) / "run.journal", [0]
    append = Journal.append

    def counted(self: Journal, event: Any) -> None:
        append(self, event)
        if self.path != parent:
            written[0] += 1
            if written[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)

    Journal.append = counted  # type: ignore[method-assign]
    execute(kind, Path(folder), journal=parent)


def serve(address: str, queue: str, folder: str, kill_after: str = "") -> None:
    """Serve the parent and its children on Temporal's `queue` (a worker process), killed with
    SIGKILL once a child's `note` of `kill_after` has run, before the worker reports it
    (`python -c 'from tests.executors.subagent_world import serve; serve(...)'`)."""
    import asyncio
    from datetime import timedelta

    from temporalio.client import Client
    from turnstile.executors import temporal

    @tool(name="note")
    def killing(text: str, context: ToolContext[str]) -> str:
        """Note `text` down (once: it is not replay-safe)."""
        done = note.fn(text, context)
        if text == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    child = as_tool(CHILD, name="research", description="Research a question.", tools=[killing])

    async def go() -> None:
        client = await Client.connect(address)
        await temporal.worker(
            client,
            models={"m": model()},
            tools=[child],
            deps=str(Path(folder) / "side"),
            task_queue=queue,
            # a killed worker's runs go back to the shared queue after this, not the default 10 s
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        ).run()

    asyncio.run(go())


if __name__ == "__main__":
    main(*sys.argv[1:])
