"""Starting a run as a workflow, and what its handle tells: the loop, the result, approvals, and
the run's events and updates as it goes."""

from __future__ import annotations

__all__ = ["LoopHandle", "run", "start"]

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from msgspec import UNSET
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Event,
    InvalidObservation,
    Loop,
    LoopSpec,
    ProtocolError,
    RunTool,
    Started,
    ToolReturned,
)
from turnstile.core.messages import Message
from turnstile.executors._agent import (
    Agent,
    ChildApproval,
    agent_guardrails,
    came_through,
    unpacked,
)
from turnstile.executors._events import ModelCallStarted, Narrator, Update
from turnstile.executors._run import Run
from turnstile.executors._served import Fork
from turnstile.executors._session import check_prompt
from turnstile.executors._toolbox import as_runner

from ._children import children_in, finished_run, running_in
from ._wire import DEFAULT_OPTIONS, TASK_QUEUE, WORKFLOW, Input, Options, encode, shippable

FOLLOW_S = 0.2
"""How often `result()` asks the workflow for its loop while someone follows the run."""


class _Follower:
    """Shows `on_event` and `on_update` what the workflow's loop recorded: its events are fed,
    once each and in order, to a loop of its own (as `Loop.replay` does), so the updates are
    those the local executors show, the deltas of a streamed reply aside (the model is called
    in the worker)."""

    def __init__(
        self,
        loop: Loop,
        on_event: Callable[[Event], None] | None,
        on_update: Callable[[Update], object] | None,
    ) -> None:
        self.loop = loop
        self._on_event = on_event
        self._narrator = None if on_update is None else Narrator(on_update, loop)

    def catch_up(self, events: Sequence[Event]) -> None:
        """Show the events past those already shown."""
        mirror = self.loop
        for event in events[len(mirror.state.events) :]:
            if type(event) is Started:
                commands = mirror.start(event.messages, event.now, event.tools)
            else:
                commands = mirror.send(event)
            if self._on_event is not None:
                self._on_event(event)
            if self._narrator is not None:
                self._narrator.recorded(mirror, [event])
                self._narrator.commands(mirror, commands)
                for command in commands:
                    if type(command) is CallModel:
                        self._narrator.show(ModelCallStarted(command.id))


class LoopHandle:
    """A run under way in Temporal. `workflow` is Temporal's own handle (to cancel, describe,
    fetch the history); the spec is the one it was started with, needed to read its dumps.
    `on_event` and `on_update` see the run's events and updates while `result()` waits, as in
    `sync.run`; `loop` is the loop the run was started from (its events are not shown again)."""

    def __init__(
        self,
        workflow: WorkflowHandle[Any, Any],
        spec: LoopSpec,
        *,
        loop: Loop | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_update: Callable[[Update], object] | None = None,
        client: Client | None = None,
    ) -> None:
        self.workflow = workflow
        self.spec = spec
        self.client = client
        """The client its sub-agents' child workflows are reached with (`start` gives it)."""
        self._follower = None
        if on_event is not None or on_update is not None:
            mirror = Loop(spec) if loop is None else Loop.load(spec, loop.dump())
            self._follower = _Follower(mirror, on_event, on_update)

    async def result(self) -> Run:
        """Wait for the run to finish; its `Run`. Meanwhile the run's events and updates go to
        `on_event` and `on_update` as the workflow records them (it is asked every
        `FOLLOW_S` seconds), and the rest once it is over; what they raise is raised here (the
        workflow goes on)."""
        outcome = asyncio.ensure_future(self.workflow.result())
        try:
            if self._follower is not None:
                await self._follow(outcome)
            data = await outcome
        finally:
            outcome.cancel()
        run = finished_run(Loop.load(self.spec, data))
        if self._follower is not None:
            self._follower.catch_up(run.state.events)
        if any(type(e) is ToolReturned and e.usage is not UNSET for e in run.state.events):
            run.children = await self.children()  # a sub-agent's result says it spent
        return run

    async def children(self) -> dict[str, Run]:
        """The finished child runs of the run's sub-agent calls, by call id, read from its
        history (of its last run, if it continued as new): `result()` fills `Run.children`
        with them."""
        return children_in(await self.workflow.fetch_history())

    async def _follow(self, outcome: asyncio.Future[Any]) -> None:
        assert self._follower is not None
        while not outcome.done():
            asked = asyncio.ensure_future(self.loop())
            try:
                await asyncio.wait({asked, outcome}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                asked.cancel()
            if not asked.done() or asked.cancelled():
                return  # the run is over: its result has every event
            try:
                loop = asked.result()
            except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
                loop = None  # no worker answers yet: ask again
            if loop is not None:
                self._follower.catch_up(loop.state.events)
            await asyncio.wait({outcome}, timeout=FOLLOW_S)

    async def loop(self) -> Loop | None:
        """The loop as it is now (a query), None before the workflow began it."""
        data = await self.workflow.query("state", result_type=bytes)
        return Loop.load(self.spec, data) if data else None

    async def waiting(self) -> list[AwaitApproval]:
        """The calls awaiting a human's approval now: the run's own, then those its sub-agents'
        child runs wait on, as `ChildApproval`s naming the calls they came through (as under
        `sync`; found with `client`, which `start` gives)."""
        found, running = await self._outstanding()
        for call_id, child in (await self._children(running)).items():
            via = (running[call_id], call_id)
            asked = await child.waiting()
            found += [came_through(request, via, child.spec.tools) for request in asked]
        return found

    async def _outstanding(self) -> tuple[list[AwaitApproval], dict[str, str]]:
        """The run's own calls awaiting approval, and the tools of its running calls by id."""
        loop = await self.loop()
        commands = [] if loop is None else loop.outstanding_commands()
        awaiting = [c for c in commands if type(c) is AwaitApproval]
        return awaiting, {c.id: c.name for c in commands if type(c) is RunTool}

    async def _children(self, running: Mapping[str, str]) -> dict[str, LoopHandle]:
        """The handles of the child runs of `running` calls, by call id. Raises `TypeError`
        for a handle made without the client that reaches them."""
        if not running:
            return {}
        history = await self.workflow.fetch_history()
        found = {k: v for k, v in running_in(history).items() if k in running}
        client = self.client
        if not found:
            return {}
        if client is None:
            raise TypeError(
                "the run's sub-agents run in child workflows: make its handle with client= "
                "(as start() does) to reach them"
            )
        return {
            call_id: LoopHandle(client.get_workflow_handle(id), spec, client=client)
            for call_id, (id, spec) in found.items()
        }

    async def answer(
        self,
        call_id: str | AwaitApproval,
        decision: bool | str | None = None,
        *,
        edit: Mapping[str, Any] | None = None,
    ) -> None:
        """Approve (True) or deny (False, or a reason) the call `call_id` (or the request
        `waiting` gave, a sub-agent's child's too), or approve it with `edit`, arguments in
        place of the model's; returns once the workflow took the answer. A `ChildApproval`
        goes down the sub-agent calls it came through (`via`) to the child run that asked; an
        id the run's own calls do not await, to the one child run that awaits it. Raises
        `ProtocolError`, saying why, when no run awaits an approval of that call (the loop's
        error for an answer it cannot take) or several do (give the request), and its
        `InvalidObservation` for an edit that does not fit the tool's schema: the run still
        waits on the call."""
        if edit is None and decision is None:
            raise TypeError("answer() needs a decision (True, False or a reason) or an edit")
        if edit is not None and decision not in (None, True):
            raise ValueError(f"an edit approves the call: give it alone, not with {decision!r}")
        via = call_id.via if isinstance(call_id, ChildApproval) else None
        if isinstance(call_id, AwaitApproval):
            call_id = call_id.id
        if via is None and not await self._awaits(call_id):
            asked = await self.waiting()
            below = [r.via for r in asked if isinstance(r, ChildApproval) and r.id == call_id]
            if len(below) > 1:
                raise ProtocolError(
                    f"{len(below)} runs await an approval of a call {call_id!r}: answer the "
                    "request waiting() gave"
                )
            via = below[0] if below else None
        if via:
            handle = self
            for _, through in via:
                handle = await handle._child(through)
            return await handle.answer(call_id, decision, edit=edit)
        reason = decision if isinstance(decision, str) else ""
        args: list[Any] = [call_id, decision is True or edit is not None, reason]
        if edit is not None:  # (three arguments otherwise: a worker from before edits takes them)
            args.append(dict(edit))
        try:
            await self.workflow.execute_update("answer", args=args)
        except WorkflowUpdateFailedError as e:
            cause = e.cause
            why = getattr(cause, "message", None) or str(cause or e)
            refused = getattr(cause, "type", None) == InvalidObservation.__name__
            raise (InvalidObservation if refused else ProtocolError)(why) from e

    async def _awaits(self, call_id: str) -> bool:
        """Whether the run's own call `call_id` awaits approval."""
        awaiting, _ = await self._outstanding()
        return any(c.id == call_id for c in awaiting)

    async def _child(self, call_id: str) -> LoopHandle:
        """The child run of the run's sub-agent call `call_id`, running now."""
        _, running = await self._outstanding()
        mine = {k: v for k, v in running.items() if k == call_id}
        found = (await self._children(mine)).get(call_id)
        if found is None:
            raise ProtocolError(f"the run has no sub-agent call {call_id!r} running")
        return found


async def start(
    client: Client,
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: str | None = None,
    id: str,
    task_queue: str = TASK_QUEUE,
    loop: Loop | None = None,
    options: Options = DEFAULT_OPTIONS,
    on_event: Callable[[Event], None] | None = None,
    on_update: Callable[[Update], object] | None = None,
    **start_options: Any,
) -> LoopHandle:
    """Start a run as the workflow `id` on `task_queue`, where a `worker` knows the `model` by
    name and runs the spec's tools (a spec that names none is offered the worker's). From
    `prompt`; or resume `loop` (a dump from any executor: the loop is told it was `Resumed`),
    going on with its conversation if `prompt` is given too, as the other executors do.
    `on_event` and `on_update` follow the run as in `sync.run`, on this side: they are called
    while the handle's `result()` waits (the model streams in the worker, so no deltas).
    `start_options` go to `Client.start_workflow`.

    An `Agent` in place of the spec names its model by its string (`"openai:gpt-4.1"`: the
    worker's `models` hold a client under that name); its tools run in the worker, which must
    have them (`worker(..., tools=agent.tools)`): the run names them, so a worker without them
    refuses it.

    Raises `ValueError` for a spec JSON cannot carry (code in it) and for a prompt the loop
    cannot start from; `TypeError` for an agent whose model is a client (a worker's, known by
    a name) or given `model=` again.
    """
    rails = agent_guardrails(spec, ())  # an agent's guardrails run in the worker, by name
    spec, name, tools = unpacked(spec, model, (), is_async=None)
    if rails and not spec.guardrails:
        spec = msgspec.structs.replace(spec, guardrails=tuple(g.spec for g in rails))
    if not isinstance(name, str):
        raise TypeError(
            f"a Temporal run names its model, and the worker holds the client: give the agent a "
            f"model string, or start its spec with model= a name; not {name!r}"
        )
    if tools != () and not spec.tools:
        spec = msgspec.structs.replace(spec, tools=tuple(as_runner(tools).specs))
    check_prompt(prompt, loop)
    given = Input(
        spec=shippable(spec),
        model=name,
        prompt=prompt if prompt is None or isinstance(prompt, str) else list(prompt),
        resumed=loop is not None and prompt is None,
        options=options,
        fork=loop.recorded.carried() if isinstance(loop, Fork) else b"",
    )
    handle = await client.start_workflow(
        WORKFLOW,
        args=[encode(given), b"" if loop is None else loop.dump()],
        id=id,
        task_queue=task_queue,
        **start_options,
    )
    return LoopHandle(
        handle, spec, loop=loop, on_event=on_event, on_update=on_update, client=client
    )


async def run(
    client: Client,
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    **kwargs: Any,
) -> Run:
    """`start` a run and wait for its result (`on_event` and `on_update` see it as it goes)."""
    return await (await start(client, spec, prompt, **kwargs)).result()
