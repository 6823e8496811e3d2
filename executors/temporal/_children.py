"""Sub-agents on Temporal: a sub-agent's call (`as_tool`) runs its child run as a child workflow
of the same `LoopWorkflow`, Temporal's own way to nest durable runs.

The worker knows its sub-agents, and theirs, by their path of names (`Child`, `sub_agents`).
Its tool activity answers a sub-agent's call with the child to run (a `ChildRun`: spec, model,
prompt, where its tools are), so the parent's history records what the child is; the workflow
then starts the child workflow under an id made of the parent's, the reply's and the call's
(`run-1/1-r0`), so a parent replayed on another worker finds the same child, never starts a
second one. The child's dump
comes back as the call's result (`answered`), with what it spent, as under `sync`.
"""

from __future__ import annotations

__all__ = [
    "Child",
    "child_run",
    "children_in",
    "finished_run",
    "run_child",
    "running_in",
    "sub_agents",
]

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.exceptions import ChildWorkflowError
from temporalio.workflow import ParentClosePolicy
from turnstile.core import (
    Finish,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
    RunTool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
)
from turnstile.core.guardrails import GuardrailFunction
from turnstile.executors._agent import Agent, SubAgent, answered
from turnstile.executors._protocols import ToolRunner
from turnstile.executors._run import Run
from turnstile.executors._session import Session
from turnstile.executors._toolbox import Toolbox, as_runner

from ._wire import WORKFLOW, ChildRun, Input, decode_input, encode, shippable, typed


class Child(NamedTuple):
    """A sub-agent as a worker holds it: the child's spec (with its tools' specs), its model's
    name among the worker's models (empty: the parent's), its tools, and its guardrails'
    functions (an `Agent`'s)."""

    spec: LoopSpec
    model: str
    runner: ToolRunner
    guardrails: tuple[GuardrailFunction, ...]


def sub_agents(runner: ToolRunner, models: Mapping[str, Any], path: str = "") -> dict[str, Child]:
    """The sub-agents among `runner`'s tools, and theirs, by path of names (`research`,
    `research/search`). Raises `TypeError` for a model the worker's `models` do not name and
    `ValueError` for a spec that cannot cross as JSON: when the worker is made, not mid-run."""
    found: dict[str, Child] = {}
    if not isinstance(runner, Toolbox):
        return found
    for spec in runner.specs:
        tool = runner.get(spec.name)
        if isinstance(tool, SubAgent):
            key = f"{path}/{tool.name}" if path else tool.name
            found[key] = child = _held(tool, models)
            found.update(sub_agents(child.runner, models, key))
    return found


def _held(tool: SubAgent, models: Mapping[str, Any]) -> Child:
    child, model = tool.child, tool.model
    if isinstance(child, Agent):
        spec, model, tools, rails = child.spec, child.model, child.tools, child.guardrails
    else:
        spec, tools, rails = child, tool.tools, ()
    if rails and not spec.guardrails:  # an agent's guardrails, as `start` sends them
        spec = msgspec.structs.replace(spec, guardrails=tuple(g.spec for g in rails))
    runner = as_runner(tools)
    if not spec.tools:
        spec = msgspec.structs.replace(spec, tools=tuple(runner.specs))
    if model is None or isinstance(model, str):
        name = model or ""
        if name and name not in models:
            raise TypeError(
                f"the sub-agent {tool.name}'s model {name!r} is not among the worker's models "
                f"({', '.join(sorted(models))}): give it to worker(models=)"
            )
    else:
        name = next((n for n, client in models.items() if client is model), "")
        if not name:
            raise TypeError(
                f"the sub-agent {tool.name}'s model is a client the worker's models do not "
                f"name: give it to worker(models=) under a name; not {model!r}"
            )
    return Child(shippable(spec), name, runner, rails)


def child_run(tool: SubAgent, child: Child, key: str, call: RunTool, deps: Any) -> bytes:
    """The worker's answer to a call of the sub-agent `tool` (at `key`): the child to run, or
    an error result for arguments that do not fit (its `check`, as under `sync`)."""
    checked = tool.check(call.arguments, ToolContext(call.id, deps))
    if isinstance(checked, ToolOutcome):
        return encode(ToolReturned(call.id, checked.content, checked.is_error, now=0.0))
    return encode(
        ChildRun(spec=child.spec, model=child.model, prompt=checked["prompt"], toolbox=key)
    )


# -- the workflow's side -----------------------------------------------------------------------


async def run_child(session: Session, call: RunTool, child: ChildRun, start: Input) -> Observation:
    """`child` as a child workflow, its result the call's: the child's answer, with what it
    spent; an error result if it failed or was cancelled. Cancelling this cancels the child
    (so does the parent's end)."""
    events = session.loop.state.events
    at = next(i for i in range(len(events) - 1, -1, -1) if type(events[i]) is ModelReplied)
    given = Input(
        spec=child.spec,
        model=child.model or start.model,
        prompt=child.prompt,
        options=start.options,
        toolbox=child.toolbox,
    )
    info = workflow.info()
    try:
        data = await workflow.execute_child_workflow(
            WORKFLOW,
            args=[encode(given), b""],
            id=f"{info.workflow_id}/{at}-{call.id}",  # as a child's journal is named
            task_queue=info.task_queue,
            result_type=bytes,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )
    except ChildWorkflowError as e:
        message = f"{call.name} stopped before its answer: its workflow ended ({e.cause or e})"
        return ToolReturned(call.id, message, True, now=0.0)
    with workflow.unsafe.imports_passed_through():  # a typed output's class: the worker's
        spec = typed(child.spec)
    run = finished_run(Loop.load(spec, data))
    session.child_finished(call.id, run)
    outcome = answered(call.name, run)
    return ToolReturned(call.id, outcome.content, outcome.is_error, now=0.0)


def finished_run(loop: Loop) -> Run:
    """The `Run` of a workflow's finished loop."""
    [finish] = loop.outstanding_commands()
    assert type(finish) is Finish
    return Run(loop, finish)


def children_in(history: WorkflowHistory) -> dict[str, Run]:
    """The child runs a parent's `history` (its last run's) holds, by call id: each child's
    spec from the input the parent started it with, its loop from the dump it returned."""
    prefix, specs, runs = f"{history.workflow_id}/", {}, {}
    for event in history.events:
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            started = event.start_child_workflow_execution_initiated_event_attributes
            specs[event.event_id] = decode_input(started.input.payloads[0].data).spec
        elif event.HasField("child_workflow_execution_completed_event_attributes"):
            done = event.child_workflow_execution_completed_event_attributes
            at_call = done.workflow_execution.workflow_id.removeprefix(prefix)
            loop = Loop.load(typed(specs[done.initiated_event_id]), done.result.payloads[0].data)
            runs[at_call.partition("-")[2]] = finished_run(loop)
    return runs


_CLOSED = (
    "child_workflow_execution_completed_event_attributes",
    "child_workflow_execution_failed_event_attributes",
    "child_workflow_execution_canceled_event_attributes",
    "child_workflow_execution_terminated_event_attributes",
    "child_workflow_execution_timed_out_event_attributes",
    "start_child_workflow_execution_failed_event_attributes",
)


def running_in(history: WorkflowHistory) -> dict[str, tuple[str, LoopSpec]]:
    """The child runs a parent's `history` started and that have not ended, by call id: each
    one's workflow id, and its spec from the input the parent started it with."""
    started: dict[int, tuple[str, str, LoopSpec]] = {}
    prefix = f"{history.workflow_id}/"
    for event in history.events:
        kind = event.WhichOneof("attributes")
        if kind == "start_child_workflow_execution_initiated_event_attributes":
            given = event.start_child_workflow_execution_initiated_event_attributes
            call_id = given.workflow_id.removeprefix(prefix).partition("-")[2]
            spec = typed(decode_input(given.input.payloads[0].data).spec)
            started[event.event_id] = (call_id, given.workflow_id, spec)
        elif kind in _CLOSED:
            started.pop(getattr(event, kind).initiated_event_id, None)
    return {call_id: (workflow_id, spec) for call_id, workflow_id, spec in started.values()}
