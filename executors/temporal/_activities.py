"""The activities: what a worker runs for its workflows (a model call, a tool call, the specs
of the tools it runs, for a spec that names none), and how a workflow schedules each.

A worker resolves the model by the name the run was started with and the tool by the call's
name, heartbeats while it waits (so a worker that dies is noticed within the heartbeat timeout)
and returns the observation as bytes; the workflow stamps its time on it. The workflow tries a
model call, or a replay-safe tool, `Options.attempts` times; a call whose worker never reports
back becomes the observation the loop takes for it (a retryable failure, an interrupted tool).
"""

from __future__ import annotations

__all__ = ["Activities", "ask_guardrail", "ask_model", "ask_tool", "ask_tool_specs"]

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar, cast

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from turnstile.core import (
    CallModel,
    CheckGuardrail,
    GuardrailChecked,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    Observation,
    RunTool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import ModelResponse
from turnstile.core.state import INTERRUPTED
from turnstile.executors._agent import SubAgent
from turnstile.executors._effects import model_failed
from turnstile.executors._guardrails import Guardrails
from turnstile.executors._invoke import ainvoke
from turnstile.executors._protocols import AsyncModelClient, ModelClient, ToolRunner
from turnstile.executors._toolbox import Toolbox, caller

from ._children import Child, child_run
from ._wire import (
    GUARDRAIL_ACTIVITY,
    MODEL_ACTIVITY,
    SPECS_ACTIVITY,
    TOOL_ACTIVITY,
    ChildRun,
    Options,
    decode_call_model,
    decode_check,
    decode_outcome,
    decode_run_tool,
    decode_specs,
    encode,
)

T = TypeVar("T")
Model = ModelClient | AsyncModelClient


async def _beating(work: Awaitable[T]) -> T:
    """Await `work`, heartbeating meanwhile; cancelling the activity abandons it."""
    timeout = activity.info().heartbeat_timeout
    every = timeout.total_seconds() / 3 if timeout else 10.0
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        task.cancel()


def _complete(model: Model, request: ModelRequest) -> Awaitable[ModelResponse]:
    """An async client's `acomplete`; a sync client's `complete` in a thread (a client with
    both, such as `ScriptedModel`, counts as sync unless it says `is_async`)."""
    if getattr(model, "is_async", False) or not isinstance(model, ModelClient):
        return cast(AsyncModelClient, model).acomplete(request)
    return asyncio.to_thread(model.complete, request)


class _Box(NamedTuple):
    """Tools a worker runs: its own, or a sub-agent's (a child run's)."""

    runner: ToolRunner
    call: Callable[[RunTool], ToolOutcome]
    timeouts: dict[str, float]


class Activities:
    """A worker's model calls (its clients by name) and tool calls (its runner, whose tools
    that ask for a `ToolContext` get the worker's `deps`; and its sub-agents' tools, by the
    sub-agent's path of names, `children`)."""

    def __init__(
        self,
        models: Mapping[str, Model],
        runner: ToolRunner,
        deps: Any = None,
        rails: Guardrails | None = None,
        children: Mapping[str, Child] | None = None,
    ) -> None:
        self._rails = rails or Guardrails()
        self._models = models
        self._runner = runner
        self._deps = deps
        self._children = children or {}
        runners = {"": runner, **{key: c.runner for key, c in self._children.items()}}
        self._boxes = {
            key: _Box(r, caller(r, deps), {s.name: s.timeout_s for s in r.specs if s.timeout_s})
            for key, r in runners.items()
        }

    @activity.defn(name=MODEL_ACTIVITY)
    async def call_model(self, model: str, command: bytes) -> bytes:
        call = decode_call_model(command)
        client = self._models.get(model)
        obs: Observation
        if client is None:
            named = ", ".join(sorted(self._models)) or "none"
            message = f"this worker has no model named {model!r} (it has {named})"
            obs = ModelFailed(call.id, message, False, now=0.0)
        else:
            try:
                response = await _beating(_complete(client, call.request))
            except Exception as e:
                obs = model_failed(call.id, e, 0.0)
            else:
                obs = ModelReplied(call.id, response, now=0.0)
        return encode(obs)

    @activity.defn(name=SPECS_ACTIVITY)
    async def tool_specs(self) -> bytes:
        """The specs of the tools this worker runs: what a spec that names none is offered."""
        return encode(tuple(self._runner.specs))

    @activity.defn(name=TOOL_ACTIVITY)
    async def run_tool(self, command: bytes, toolbox: str = "") -> bytes:
        """The call, by the tools of `toolbox` (a child run's: its sub-agent's path); a
        sub-agent's call is answered with the child run to start (`ChildRun`)."""
        call = decode_run_tool(command)
        box = self._boxes.get(toolbox)
        if box is None:
            message = f"this worker has no sub-agent {toolbox!r}, whose tools the run asks for"
            return encode(ToolReturned(call.id, message, True, now=0.0))
        tool = box.runner.get(call.name) if isinstance(box.runner, Toolbox) else None
        if isinstance(tool, SubAgent):
            key = f"{toolbox}/{call.name}" if toolbox else call.name
            return child_run(tool, self._children[key], key, call, self._deps)
        limit = box.timeouts.get(call.name)
        try:
            outcome = await _beating(asyncio.wait_for(self._invoke(box, tool, call), limit))
        except TimeoutError:
            outcome = ToolOutcome(f"{call.name} timed out after {limit:g} s", True)
        return encode(ToolReturned(call.id, outcome.content, outcome.is_error, now=0.0))

    @activity.defn(name=GUARDRAIL_ACTIVITY)
    async def check_guardrail(self, command: bytes) -> bytes:
        """A guardrail's check, by the worker's function of that name (none: it trips)."""
        check = decode_check(command)
        return encode(await _beating(self._rails.acheck(check, lambda: 0.0)))

    async def _invoke(self, box: _Box, tool: Any, call: RunTool) -> ToolOutcome:
        """Async tools are awaited here; everything else runs in a thread."""
        if tool is not None and tool.is_async:
            return await ainvoke(tool, call.arguments, ToolContext(call.id, self._deps))
        return await asyncio.to_thread(box.call, call)


# -- the workflow's side -----------------------------------------------------------------------


async def ask_model(options: Options, model: str, command: CallModel) -> Observation:
    """`command` as an activity of the worker that knows `model` by that name."""
    try:
        data = await _retried(
            options, MODEL_ACTIVITY, [model, encode(command)], f"model:{command.id}"
        )
    except ActivityError as e:
        message = f"the model call never returned: {e.cause or e}"
        return ModelFailed(command.id, message, True, now=0.0)
    return decode_outcome(data)


async def ask_tool(
    options: Options, spec: ToolSpec | None, command: RunTool, toolbox: str = ""
) -> Observation | ChildRun:
    """`command` as an activity, within its tool's `spec` (its timeout, whether it is safe to
    try again), by the tools of `toolbox` (a child run's); one whose worker never reports back
    was interrupted. A sub-agent's call comes back as the child run to start."""
    safe = spec is not None and spec.replay_safe
    limit = spec.timeout_s if spec is not None and spec.timeout_s else None
    # a run of the worker's own tools sends the command alone, as before sub-agents
    args = [encode(command), toolbox] if toolbox else [encode(command)]
    try:
        data = await workflow.execute_activity(
            TOOL_ACTIVITY,
            args=args,
            result_type=bytes,
            activity_id=command.id,
            start_to_close_timeout=timedelta(
                seconds=options.tool_timeout_s if limit is None else limit + options.heartbeat_s
            ),
            heartbeat_timeout=timedelta(seconds=options.heartbeat_s),
            retry_policy=_retries(options, options.attempts if safe else 1),
        )
    except ActivityError:
        return ToolReturned(command.id, INTERRUPTED, True, now=0.0)
    return decode_outcome(data)


async def ask_guardrail(options: Options, command: CheckGuardrail) -> Observation:
    """`command` as an activity, tried `Options.attempts` times (a check may run twice); one
    whose worker never reports back trips: a guardrail fails closed."""
    try:
        data = await _retried(
            options, GUARDRAIL_ACTIVITY, [encode(command)], f"guardrail:{command.id}"
        )
    except ActivityError as e:
        message = f"the guardrail {command.name} never answered: {e.cause or e}"
        return GuardrailChecked(command.id, True, message, now=0.0)
    return decode_outcome(data)


async def ask_tool_specs(options: Options) -> tuple[ToolSpec, ...]:
    """The specs of the tools a worker runs, asked of one."""
    data = await workflow.execute_activity(
        SPECS_ACTIVITY,
        result_type=bytes,
        activity_id="tool-specs",
        start_to_close_timeout=timedelta(seconds=options.model_timeout_s),
        retry_policy=_retries(options, options.attempts),
    )
    return decode_specs(data)


async def _retried(options: Options, name: str, args: list[Any], activity_id: str) -> bytes:
    """The activity `name`, within a model call's timeout, tried `Options.attempts` times."""
    return cast(
        bytes,
        await workflow.execute_activity(
            name,
            args=args,
            result_type=bytes,
            activity_id=activity_id,
            start_to_close_timeout=timedelta(seconds=options.model_timeout_s),
            heartbeat_timeout=timedelta(seconds=options.heartbeat_s),
            retry_policy=_retries(options, options.attempts),
        ),
    )


def _retries(options: Options, attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=options.retry_interval_s),
        maximum_attempts=attempts,
    )
