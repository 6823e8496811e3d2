"""Guardrails under Temporal: each check an activity of the worker that holds its function; a
tool-call check that trips on the first of a reply's two calls runs neither."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turnstile.core import GuardrailChecked
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import ScriptedModel

from tests.executors.temporal_kit import Env, env, temporal  # noqa: F401  (the fixture)
from tests.executors.test_guardrails import COUNTER, RAILS, SPEC, delete, ran, tripped

MODELS = {
    "two-calls": lambda request: ModelResponse(
        [
            Text("cleaning up"),
            ToolCall("c1", "delete", {"path": "/"}),
            ToolCall("c2", "delete", {"path": "/tmp/x"}),
        ],
        ModelStop.tool_use,
    ),
}


@pytest.fixture
def worker(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:  # noqa: F811
    counter = tmp_path / "ran"
    monkeypatch.setenv(COUNTER, str(counter))
    queue = f"rails-{uuid.uuid4().hex[:12]}"

    async def make() -> Any:
        models = {name: ScriptedModel(fn) for name, fn in MODELS.items()}
        return temporal.worker(
            env.client, models=models, tools=[delete], guardrails=RAILS, task_queue=queue
        )

    made = env.wait(make(), 30)
    env.submit(made.run())
    try:
        yield queue, counter
    finally:
        env.wait(made.shutdown(), 30)


def test_a_tool_call_guardrail_that_trips_runs_no_call_of_its_round_under_temporal(
    env: Env,  # noqa: F811
    worker: tuple[str, Path],
) -> None:
    queue, counter = worker
    run = env.wait(
        temporal.run(
            env.client, SPEC, "clean up", model="two-calls", id=f"{queue}-1", task_queue=queue
        ),
        90,
    )
    tripped(run)
    assert ran(counter) == []
    tripping = [e for e in run.state.events if type(e) is GuardrailChecked and e.tripped]
    assert [e.check_id for e in tripping] == ["c1/tool_call/no_root"]
