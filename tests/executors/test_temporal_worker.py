"""A Temporal worker: the clients its model strings name, and the workflow runner it runs the
loop's workflow in."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="needs temporalio: pip install 'turnstile[temporal]'")
from turnstile.executors import ScriptedModel

from tests.executors.temporal_kit import Env, env, temporal

__all__ = ["env"]


def test_a_worker_builds_the_clients_its_model_strings_name(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`models` may name clients by model string (alone, or as a name's value), built async from
    the environment as `model_client` builds them; a missing key fails the worker at once."""
    from turnstile.executors.temporal._worker import clients_of
    from turnstile.providers import MissingAPIKey

    async def make() -> Any:  # a worker is built on the client's event loop
        return temporal.worker(env.client, models=["openai:gpt-4.1"])

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
        env.wait(make(), 30)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    scripted = ScriptedModel([])
    built = clients_of({"fast": "openai-responses:gpt-4.1-mini", "scripted": scripted})
    assert built["scripted"] is scripted
    assert (built["fast"].model, built["fast"].is_async) == ("gpt-4.1-mini", True)  # type: ignore[union-attr]
    named = clients_of(["anthropic:claude-sonnet-4-5"])
    assert [(name, c.is_async) for name, c in named.items()] == [  # type: ignore[union-attr]
        ("anthropic:claude-sonnet-4-5", True)
    ]
    assert env.wait(make(), 30) is not None  # the key is set: it builds


def test_a_worker_runs_the_workflow_outside_the_sandbox_unless_given_one(env: Env) -> None:
    """The workflow runs turnstile's code only, which the sandbox passes through: a worker
    skips the sandbox's cost a workflow task, and takes one when given it."""
    from temporalio.worker import UnsandboxedWorkflowRunner
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
    from turnstile.executors.temporal._worker import RESTRICTIONS

    sandboxed = SandboxedWorkflowRunner(restrictions=RESTRICTIONS)

    async def make(**options: Any) -> Any:  # a worker is built on the client's event loop
        queue = f"runner-{uuid.uuid4().hex[:8]}"
        built = temporal.worker(env.client, models={}, task_queue=queue, **options)
        return built.config()["workflow_runner"]

    assert isinstance(env.wait(make(), 30), UnsandboxedWorkflowRunner)
    assert env.wait(make(workflow_runner=sandboxed), 30) is sandboxed
