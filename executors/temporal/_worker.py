"""`worker`: a Temporal worker that runs turnstile's workflow and activities."""

from __future__ import annotations

__all__ = ["clients_of", "worker"]

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxRestrictions
from turnstile.core import Tool
from turnstile.core.guardrails import GuardrailFunction
from turnstile.executors._agent import built
from turnstile.executors._guardrails import Guardrails
from turnstile.executors._protocols import AsyncModelClient, ModelClient, ToolRunner
from turnstile.executors._toolbox import as_runner

from ._activities import Activities
from ._children import sub_agents
from ._wire import TASK_QUEUE
from ._workflow import LoopWorkflow

# turnstile has nothing a workflow could leak through (the core is pure; the workflow module is
# checked by replaying histories), so a sandbox shares its modules instead of importing them
# again for every run: what the tests replay histories in, and a worker runs in if asked
RESTRICTIONS = SandboxRestrictions.default.with_passthrough_modules(
    "turnstile", "msgspec", "transitions"
)


Model = ModelClient | AsyncModelClient


def clients_of(models: Mapping[str, Model | str] | Iterable[str]) -> dict[str, Model]:
    """Each name's client: a model string's built async (`model_client`), a client as given."""
    named = models if isinstance(models, Mapping) else {name: name for name in models}
    clients: dict[str, Model] = {}
    for name, model in named.items():
        client = built(model, is_async=True)
        if not isinstance(client, ModelClient | AsyncModelClient):
            raise TypeError(
                f"the model {name!r} is not a client (complete(request) or async "
                f"acomplete(request) -> ModelResponse): {model!r}"
            )
        clients[name] = client
    return clients


def worker(
    client: Client,
    *,
    models: Mapping[str, Model | str] | Iterable[str],
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    guardrails: Iterable[GuardrailFunction] = (),
    deps: Any = None,
    task_queue: str = TASK_QUEUE,
    **options: Any,
) -> Worker:
    """A `temporalio.worker.Worker` for turnstile runs on `task_queue`: `run()` it, or use it as
    an async context manager.

    `models` are the clients runs name (`start(..., model="name")`): a client, or a model string
    (`"openai:gpt-4.1"`) whose async client is built here from the environment; a list of model
    strings names each client by its string, as an `Agent`'s does. `guardrails`: the functions
    (`@guardrail`) of the guardrails runs name, each check run as an activity (a check whose
    function the worker lacks trips). `tools` run their calls (a
    `Sandbox`, a `Toolbox`, tools), and a spec that names no tools is offered them; a sub-agent
    among them (`as_tool`) runs each call's child run as a child workflow, whose tools, model
    (a client must be among `models`) and guardrails are the sub-agent's. `deps`
    reaches every tool that asks for a `ToolContext`, as in `sync.run`: it stays in the worker
    process, never in a history. A sandbox
    starts each call's process with `subprocess`, never by forking the worker, whose threads a
    fork would not take along. `options` go to `Worker` (`max_concurrent_activities=`, ...).
    The workflow runs outside Temporal's sandbox: it runs turnstile's code only (user code runs
    in the activities), which a sandbox passes through anyway, and the sandbox cost a worker a
    third of its CPU a turn; `workflow_runner=SandboxedWorkflowRunner(restrictions=RESTRICTIONS)`
    puts it back.
    Raises `TypeError` for a model that is no client, and `model_client`'s errors for a model
    string (a missing key: `MissingAPIKey`).
    """
    clients, runner = clients_of(models), as_runner(tools)
    children = sub_agents(runner, clients)
    rails = dict.fromkeys([*guardrails, *(g for c in children.values() for g in c.guardrails)])
    activities = Activities(clients, runner, deps, Guardrails(rails), children)
    options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[LoopWorkflow],
        activities=[
            activities.call_model,
            activities.run_tool,
            activities.tool_specs,
            activities.check_guardrail,
        ],
        **options,
    )
