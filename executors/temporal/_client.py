"""Starting a run as a workflow, and what its handle tells: the loop, the result, approvals."""

from __future__ import annotations

__all__ = ["LoopHandle", "run", "start"]

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle
from turnstile.core import AwaitApproval, Finish, Loop, LoopSpec, Message
from turnstile.executors._run import Run, check_prompt

from ._wire import DEFAULT_OPTIONS, TASK_QUEUE, WORKFLOW, Input, Options, encode, shippable


class LoopHandle:
    """A run under way in Temporal. `workflow` is Temporal's own handle (to cancel, describe,
    fetch the history); the spec is the one it was started with, needed to read its dumps."""

    def __init__(self, workflow: WorkflowHandle[Any, Any], spec: LoopSpec) -> None:
        self.workflow = workflow
        self.spec = spec

    async def result(self) -> Run:
        """Wait for the run to finish; its `Run`."""
        data = await self.workflow.result()
        loop = Loop.load(self.spec, data)
        [finish] = loop.outstanding_commands()
        assert type(finish) is Finish
        return Run(loop, finish)

    async def loop(self) -> Loop | None:
        """The loop as it is now (a query), None before the workflow began it."""
        data = await self.workflow.query("state", result_type=bytes)
        return Loop.load(self.spec, data) if data else None

    async def waiting(self) -> list[AwaitApproval]:
        """The calls awaiting a human's approval now."""
        loop = await self.loop()
        commands = [] if loop is None else loop.outstanding_commands()
        return [c for c in commands if type(c) is AwaitApproval]

    async def answer(self, call_id: str, decision: bool | str) -> None:
        """Approve (True) or deny (False, or a reason) the call `call_id`; returns once the
        workflow took the answer. Raises `temporalio.client.WorkflowUpdateFailedError` when
        the run awaits no approval of that call."""
        reason = decision if isinstance(decision, str) else ""
        await self.workflow.execute_update("answer", args=[call_id, decision is True, reason])


async def start(
    client: Client,
    spec: LoopSpec,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: str,
    id: str,
    task_queue: str = TASK_QUEUE,
    loop: Loop | None = None,
    options: Options = DEFAULT_OPTIONS,
    **start_options: Any,
) -> LoopHandle:
    """Start a run as the workflow `id` on `task_queue`, where a `worker` knows the `model` by
    name and runs the spec's tools. From `prompt`; or resume `loop` (a dump from any executor:
    the loop is told it was `Resumed`), going on with its conversation if `prompt` is given too,
    as the other executors do. `start_options` go to `Client.start_workflow`.

    Raises `ValueError` for a spec JSON cannot carry (code in it) and for a prompt the loop
    cannot start from.
    """
    check_prompt(prompt, loop)
    given = Input(
        spec=shippable(spec),
        model=model,
        prompt=prompt if prompt is None or isinstance(prompt, str) else list(prompt),
        resumed=loop is not None and prompt is None,
        options=options,
    )
    handle = await client.start_workflow(
        WORKFLOW,
        args=[encode(given), b"" if loop is None else loop.dump()],
        id=id,
        task_queue=task_queue,
        **start_options,
    )
    return LoopHandle(handle, spec)


async def run(
    client: Client,
    spec: LoopSpec,
    prompt: str | Sequence[Message] | None = None,
    **kwargs: Any,
) -> Run:
    """`start` a run and wait for its result."""
    return await (await start(client, spec, prompt, **kwargs)).result()
