"""The conformance suite gains Temporal: every fixture run as a workflow, its model calls and
tool calls as activities, gives the sync executor's event log; and each run's recorded history
replays with the workflow as it is, without a nondeterminism error."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="needs temporalio: pip install 'turnstile[temporal]'")
from temporalio.client import WorkflowHistory
from turnstile.core import Loop
from turnstile.executors import Run, ScriptedModel, ToolRunner, sync
from turnstile.executors.sandbox import Sandbox, SandboxLimits
from turnstile.executors.testing import replay
from turnstile.providers.replay import (
    RecordedTools,
    client_and_transport,
    load_trace,
    prompt_for,
    spec_for,
)

from tests.executors.temporal_kit import Env, env, keep, needs_server, temporal
from tests.executors.temporal_kit import replay as replay_history
from tests.executors.test_conformance import (
    FIXTURES,
    NAMES_NO_TOOLS,
    OFFERED,
    TOOLS,
    event_log,
    offered,
    runner_tools,
)

__all__ = ["env"]

pytestmark = needs_server


def through_temporal(env: Env, path: Path, tools: ToolRunner | None = None) -> Run:
    """The fixture's loop as a workflow on a worker of its own, over the replayed SDK client;
    its history is replayed before the run is returned."""
    trace = load_trace(path)
    model, transport = client_and_transport(trace, sync=True)
    recorded = RecordedTools(trace)
    queue = f"conformance-{path.parent.name}-{path.stem}-{uuid.uuid4().hex[:8]}"

    async def go() -> tuple[Run, WorkflowHistory]:
        runner = recorded if tools is None else tools
        async with temporal.worker(
            env.client, models={"replay": model}, tools=runner, task_queue=queue
        ):
            handle = await temporal.start(
                env.client,
                spec_for(trace),
                prompt_for(trace),
                model="replay",
                id=queue,
                task_queue=queue,
            )
            run = await handle.result()
            return run, await handle.workflow.fetch_history()

    run, history = env.wait(go(), 60)
    assert not transport.remaining, f"exchanges left unused: {len(transport.remaining)}"
    assert not recorded.unrecorded
    replay_history(history)
    keep(history, f"{path.parent.name}-{path.stem}" + ("-sandbox" if tools else ""))
    return run


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_temporal_gives_the_sync_executors_event_log(path: Path, env: Env) -> None:
    assert event_log(through_temporal(env, path)) == event_log(replay(path))


def test_a_sandboxed_worker_gives_the_same_event_log(env: Env) -> None:
    path = next(p for p in FIXTURES if p.parent.name == "anthropic" and p.name == "weather.json")
    with Sandbox(TOOLS, SandboxLimits(wall_s=20)) as sandbox:
        assert event_log(through_temporal(env, path, sandbox)) == event_log(replay(path))


def test_a_spec_naming_no_tools_is_offered_the_workers_tools(env: Env) -> None:
    queue = f"offered-{uuid.uuid4().hex[:8]}"

    async def go() -> tuple[Run, WorkflowHistory]:
        models = {"offered": ScriptedModel(offered)}
        async with temporal.worker(
            env.client, models=models, tools=runner_tools(), task_queue=queue
        ):
            handle = await temporal.start(
                env.client, NAMES_NO_TOOLS, "note it", model="offered", id=queue, task_queue=queue
            )
            return await handle.result(), await handle.workflow.fetch_history()

    run, history = env.wait(go(), 60)
    assert run.output == OFFERED
    model = ScriptedModel(offered)
    by_sync = sync.run(NAMES_NO_TOOLS, "note it", model=model, tools=runner_tools())
    assert event_log(run) == event_log(by_sync)
    replay_history(history)
    keep(history, "worker-tools")


@pytest.mark.parametrize("name", ["anthropic/weather.json", "anthropic/fallback.json"])
def test_a_fork_under_temporal_serves_its_parents_log(name: str, env: Env) -> None:
    from turnstile.executors import fork

    from tests.executors.test_fork import Counted, Untouchable

    trace = load_trace(FIXTURES[0].parents[1] / name)
    parent = replay(trace)
    events = parent.state.events
    for at in (1, len(events) // 2, len(events) - 1):
        forked = fork(parent.loop, at)
        tools = Counted(RecordedTools(trace))
        queue = f"fork-{at}-{uuid.uuid4().hex[:8]}"

        async def go(forked: Loop = forked, tools: Counted = tools, queue: str = queue) -> Run:
            models = {"nobody": Untouchable()}
            async with temporal.worker(env.client, models=models, tools=tools, task_queue=queue):
                handle = await temporal.start(
                    env.client,
                    parent.loop.spec,
                    model="nobody",
                    id=queue,
                    task_queue=queue,
                    loop=forked,
                )
                return await handle.result()

        run = env.wait(go(), 60)
        assert event_log(run) == event_log(parent), f"forked at {at}"
        assert tools.ran == []
