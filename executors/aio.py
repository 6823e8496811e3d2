"""The async executor, under asyncio or trio (on anyio): every command the loop hands out runs at
once, in one task group.

The core decides what may overlap (it only hands out calls that may run together); this driver
starts each command as a task and feeds the observations back as they arrive. Async tools and
async model clients are awaited; sync tools, sync model clients and sync approvers run in worker
threads, so the event loop (an asyncio web app's, say) never blocks. A per-tool timeout ends in
an error result naming it. The loop's deadline wakes the driver while every task is still busy.
When the run itself is cancelled (a cancel scope, `asyncio.timeout`, a cancelled task, Ctrl-C),
the loop is told, writes a result for every started call, and `run` returns `Finish(cancelled)`
instead of raising.

`updates(...)` runs the same inside an `async with` block and hands its `Update`s over as an
async iterator.
"""

from __future__ import annotations

__all__ = ["Updates", "run", "updates"]

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core import (
    Command,
    Event,
    Loop,
    LoopSpec,
    Observation,
    Tool,
)
from turnstile.core.guardrails import GuardrailFunction
from turnstile.core.messages import Message

try:
    import anyio  # noqa: F401  # what the driver runs on: without it, say which extra installs it
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "aio", needed_by="turnstile.executors.aio") from None

from ._agent import Agent, agent_guardrails, parenting, unpacked
from ._driver import Approver, Driver
from ._effects import JournalArg, opened
from ._events import Update
from ._guardrails import Guardrails, as_guardrails
from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._run import Run
from ._session import Session
from ._stream import Updates, streamed
from ._tasks import (
    event_loop_clock,
    lazy_caller,
)
from ._toolbox import Toolbox, as_runner


def updates(
    spec: LoopSpec | Agent, prompt: str | Sequence[Message] | None = None, **options: Any
) -> contextlib.AbstractAsyncContextManager[Updates]:
    """Start `run(spec, prompt, **options)` and hand over its `Update`s as they happen:

        async with aio.updates(spec, prompt, model=client, tools=tools) as stream:
            async for update in stream:
                ...
        run = stream.run

    The iteration ends with the run. Leaving the block before that cancels the run (it
    finishes `cancelled`, its state valid), an error included; an error of the run, or of
    the block, is raised from the block as it is (not in an `ExceptionGroup`).
    """
    return streamed(run, spec, prompt, options)


async def run(
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: AsyncModelClient | ModelClient | str | None = None,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    guardrails: Guardrails | Sequence[GuardrailFunction] = (),
    loop: Loop | None = None,
    journal: JournalArg = None,
    approve: Approver | None = None,
    tool_timeout: float | None = None,
    clock: Callable[[], float] | None = None,
    deps: Any = None,
    on_event: Callable[[Event], None] | None = None,
    on_update: Callable[[Update], object] | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
) -> Run:
    """Drive a loop under asyncio or trio until it finishes, or until only approvals are left to
    wait for.

    Arguments as for `sync.run`; the guardrails' checks run concurrently with what they were
    handed out with (the run's input checks with its first model call, a round's checks
    together), async ones awaited, sync ones in worker threads. `tool_timeout` applies to tools
    whose `ToolSpec` sets none.
    The calls the loop hands out together are journaled as started, and made durable, before
    the first of them runs. Times come from the event loop's clock (`anyio.current_time`), so
    `turnstile.executors.testing.run_async` makes timeouts, and the waits a retry's
    `CallModel.not_before` asks for, instant in tests (trio's `MockClock` does too, but its
    autojump also passes the time while a sync tool or client works in a thread).
    Raises `TypeError` at once for a `model` that is neither an `AsyncModelClient` nor a
    `ModelClient`. A model string builds an async client.
    """
    rails = as_guardrails(agent_guardrails(spec, guardrails))
    spec, model, tools = unpacked(spec, model, tools, is_async=True)
    spec = rails.bound(spec)
    # a list of tools is no runner: not asking the runtime protocol saves a run 12 µs
    runner = Toolbox(tools) if type(tools) is list else as_runner(tools)
    run_call = lazy_caller(runner, deps, lambda: session.loop.state.events)
    with opened(journal, loop) if journal is not None else _NO_JOURNAL as journaled:
        session = Session(
            spec,
            prompt,
            loop=loop,
            tool_specs=runner.specs,
            clock=clock or event_loop_clock(),
            journal=journaled,
            on_event=on_event,
            on_update=on_update,
            on_step=on_step,
        )
        driver = Driver(session, model, runner, run_call, approve, tool_timeout, deps, rails)
        with parenting(
            session, model, run, approve
        ):  # its sub-agents' calls run their children here
            return await driver.drive()


_NO_JOURNAL = contextlib.nullcontext(None)
"""`opened(None, ...)` without a generator a run (a `nullcontext` can be entered again)."""
