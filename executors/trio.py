"""The trio executor: every command the loop hands out runs at once, in one nursery.

The core decides what may overlap (it only hands out calls that may run together); this driver
just starts each command as a task and feeds the observations back as they arrive. Sync tools,
sync model clients and sync approvers run in worker threads. A per-tool timeout ends in an error
result naming it. When the run itself is cancelled (a cancel scope, or Ctrl-C), the loop is
told, writes a result for every started call, and `run` returns `Finish(cancelled)` instead of
raising.
"""

from __future__ import annotations

__all__ = ["run"]

import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

from turnstile.core import (
    AwaitApproval,
    CallModel,
    Cancelled,
    Command,
    Event,
    Finish,
    Loop,
    LoopSpec,
    Message,
    ModelReplied,
    Observation,
    RunTool,
    Tick,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
    ToolStarted,
)

try:
    import trio
except ModuleNotFoundError as error:
    from turnstile.providers._optional import missing_extra

    raise missing_extra(error, "trio", needed_by="turnstile.executors.trio") from None

from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._run import (
    JournalArg,
    Recorder,
    Run,
    answer,
    check_model,
    model_failed,
    opened,
    prepare,
    renamed_state,
)
from ._toolbox import Toolbox, as_runner, caller

Approver = Callable[[AwaitApproval], "bool | str | Awaitable[bool | str]"]


async def _complete(model: AsyncModelClient | ModelClient, command: CallModel) -> Any:
    if isinstance(model, AsyncModelClient) and getattr(model, "is_async", True):
        return await model.acomplete(command.request)
    sync_model = cast(ModelClient, model)
    return await trio.to_thread.run_sync(
        sync_model.complete, command.request, abandon_on_cancel=True
    )


async def _invoke(
    runner: ToolRunner, run_call: Callable[[RunTool], ToolOutcome], command: RunTool
) -> ToolOutcome:
    """Async tools are awaited here; everything else runs in a worker thread."""
    tool = runner.get(command.name) if isinstance(runner, Toolbox) else None
    if tool is not None and tool.is_async:
        return await tool.ainvoke(command.arguments, ToolContext(command.id))
    return await trio.to_thread.run_sync(run_call, command, abandon_on_cancel=True)


def _is_async(fn: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  # an object whose __call__ is async
    )


def _only(group: BaseExceptionGroup[BaseException], kinds: tuple[type, ...]) -> bool:
    _, rest = group.split(kinds)
    return rest is None


async def run(
    spec: LoopSpec,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: AsyncModelClient | ModelClient,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    loop: Loop | None = None,
    journal: JournalArg = None,
    approve: Approver | None = None,
    tool_timeout: float | None = None,
    clock: Callable[[], float] = trio.current_time,
    on_event: Callable[[Event], None] | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
    state: Loop | None = None,
) -> Run:
    """Drive a loop under trio until it finishes, or until only approvals are left to wait for.

    Arguments as for `sync.run`; `tool_timeout` applies to tools whose `ToolSpec` sets none.
    The calls the loop hands out together are journaled as started, and made durable, before
    the first of them runs.
    Times come from trio's clock, so `trio.testing.MockClock` makes timeouts, and the waits a
    retry's `CallModel.not_before` asks for, instant in tests.
    Raises `TypeError` at once for a `model` that is neither an `AsyncModelClient` nor a
    `ModelClient`.
    """
    check_model(model, can_await=True)
    resumed = renamed_state(loop, state)
    runner = as_runner(tools)
    run_call = caller(runner)
    with opened(journal, resumed) as journaled:
        record, now = prepare(spec, runner, prompt, resumed, clock, journaled, on_event)
        return await _drive(record, now, model, runner, run_call, approve, tool_timeout, on_step)


async def _drive(
    record: Recorder,
    now: Callable[[], float],
    model: AsyncModelClient | ModelClient,
    runner: ToolRunner,
    run_call: Callable[[RunTool], ToolOutcome],
    approve: Approver | None,
    tool_timeout: float | None,
    on_step: Callable[[Command | Observation], None] | None,
) -> Run:
    loop = record.loop
    timeouts = {t.name: t.timeout_s or tool_timeout or math.inf for t in loop.spec.tools}
    # each observation comes keyed by its command's id, a tick by its ticker's scope
    observations, inbox = trio.open_memory_channel[tuple[object, Observation]](math.inf)
    tasks: dict[object, trio.CancelScope] = {}
    waiting: list[AwaitApproval] = []
    finish: Finish | None = None

    async def model_call(command: CallModel) -> Observation:
        if command.not_before is not None:  # on the clock that stamps observations
            await trio.sleep_until(trio.current_time() + command.not_before - now())
        try:
            response = await _complete(model, command)
        except Exception as e:
            return model_failed(command.id, e, now())
        return ModelReplied(command.id, response, now=now())

    async def tool_call(command: RunTool) -> Observation:
        limit = timeouts.get(command.name, tool_timeout or math.inf)
        with trio.move_on_after(limit):
            outcome = await _invoke(runner, run_call, command)
            return ToolReturned(command.id, outcome.content, outcome.is_error, now=now())
        return ToolReturned(
            command.id, f"{command.name} timed out after {limit:g} s", True, now=now()
        )

    async def approval(command: AwaitApproval) -> Observation:
        assert approve is not None
        if _is_async(approve):
            decision = approve(command)
        else:  # a person at a prompt, say: other calls go on meanwhile
            decision = await trio.to_thread.run_sync(approve, command, abandon_on_cancel=True)
        if inspect.isawaitable(decision):
            decision = await decision
        return answer(command, decision, now())

    async def task(
        key: object, scope: trio.CancelScope, work: Callable[[], Awaitable[Observation]]
    ) -> None:
        with scope:
            observations.send_nowait((key, await work()))

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C must not land halfway through a step
    def step(nursery: trio.Nursery, obs: Observation | None) -> None:
        """Hand `obs` to the loop (or begin) and launch what it decides: calls are journaled as
        started, and everything made durable, before any of it runs."""
        nonlocal finish
        if obs is None:
            commands = record.first(now())
        else:
            if on_step is not None:
                on_step(obs)
            commands = record.send(obs)
        launch: list[tuple[str, Callable[[], Awaitable[Observation]]]] = []
        work: Callable[[], Awaitable[Observation]]
        for command in commands:
            if on_step is not None:
                on_step(command)
            match command:
                case Finish():
                    finish = command
                    continue
                case CallModel(id=key):
                    work = functools.partial(model_call, command)
                case RunTool(id=key):
                    record.send(ToolStarted(key, now=now()))
                    work = functools.partial(tool_call, command)
                case AwaitApproval(id=key) if approve is not None:
                    work = functools.partial(approval, command)
                case _:
                    waiting.append(command)  # type: ignore[arg-type]
                    continue
            launch.append((key, work))
        if launch:
            record.commit()
        for key, work in launch:
            tasks[key] = scope = trio.CancelScope()
            nursery.start_soon(task, key, scope, work)

    ticker = trio.CancelScope()  # the armed tick's scope, which keys its Tick
    armed = False
    armed_for: float | None = None

    async def tick(scope: trio.CancelScope, when: float) -> None:
        with scope:
            await trio.sleep_until(when)
            observations.send_nowait((scope, Tick(now=now())))

    def arm(nursery: trio.Nursery) -> None:
        """Wake the loop when its deadline is due, even while every task is still busy. The
        deadline moves as the run goes (time spent waiting only for a person does not count),
        so this follows `next_deadline()` after every step; a tick armed before is dropped."""
        nonlocal ticker, armed, armed_for
        deadline = loop.next_deadline()
        if armed and deadline == armed_for:
            return
        ticker.cancel()
        ticker, armed, armed_for = trio.CancelScope(), deadline is not None, deadline
        if deadline is not None:
            nursery.start_soon(tick, ticker, trio.current_time() + deadline - now())

    def abandon_stale() -> None:
        """Cancel tasks whose results the loop no longer waits for (it finished, or a guard
        gave up on a running round)."""
        wanted = loop.outstanding_ids()
        for key in [k for k in tasks if k not in wanted]:
            tasks.pop(key).cancel()

    try:
        async with trio.open_nursery() as nursery:
            step(nursery, None)
            arm(nursery)
            while finish is None and tasks:
                key, obs = await inbox.receive()
                if key is ticker:
                    armed = False  # it fired: the next one is armed even for the same time
                elif tasks.pop(key, None) is None:
                    continue  # abandoned, or a tick armed before the deadline moved
                step(nursery, obs)
                abandon_stale()
                arm(nursery)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if not _only(group, (trio.Cancelled, KeyboardInterrupt)) or finish is not None:
            raise
        step(nursery, Cancelled("the run was cancelled", now=now()))
    return Run(loop, finish, waiting)
