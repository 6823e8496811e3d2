"""The plain synchronous executor: one command at a time, tools run inline, one after another
(`aio` overlaps them); a sync tool cannot be interrupted, so per-tool timeouts need the sandbox.
"""

from __future__ import annotations

__all__ = ["call_model", "run"]

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core import (
    AwaitApproval,
    CallModel,
    Command,
    Event,
    Finish,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
    RunTool,
    Tool,
    ToolReturned,
)
from turnstile.core.messages import Message
from turnstile.providers import Delta

from ._agent import Agent, unpacked
from ._effects import JournalArg, answer, check_model, model_failed, opened
from ._events import Update
from ._invoke import sync_failure
from ._protocols import ModelClient, ToolRunner, takes
from ._run import Run
from ._session import Session
from ._toolbox import as_runner, caller

Approver = Callable[[AwaitApproval], "bool | str"]


def call_model(
    model: ModelClient,
    command: CallModel,
    now: Callable[[], float],
    sleep: Callable[[float], object] = time.sleep,
    on_delta: Callable[[Delta], object] | None = None,
) -> Observation:
    """One model call as an observation, sent no sooner than its `not_before` (waiting with
    `sleep`); a failure of any kind becomes `ModelFailed`. `on_delta` goes to a client whose
    `complete` takes it."""
    if command.not_before is not None and (wait := command.not_before - now()) > 0:
        sleep(wait)
    streamed = {} if on_delta is None else {"on_delta": on_delta}
    try:
        response = model.complete(command.request, **streamed)
    except BaseException as e:  # no one cancels a sync call: a cancel is the client's failure
        if not sync_failure(e):
            raise
        return model_failed(command.id, e, now())
    return ModelReplied(command.id, response, now=now())


def run(
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: ModelClient | str | None = None,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    loop: Loop | None = None,
    journal: JournalArg = None,
    approve: Approver | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    deps: Any = None,
    on_event: Callable[[Event], None] | None = None,
    on_update: Callable[[Update], object] | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
) -> Run:
    """Drive a loop until it finishes, or until only human approvals are left to wait for.

    `spec` may be an `Agent`, which brings its model and tools (then `model=` and `tools=` are
    not given again); `model` may be a model string (`"openai:gpt-4.1"`, see
    `turnstile.providers.model_client`).

    Start from `prompt`, or resume `loop` (from `Loop.load` / `Loop.replay`): the loop is told
    it was `Resumed` and decides what to carry out again. A `prompt` with a `loop` starts it if
    it is idle, and goes on with its conversation (a new run, the prompt the next user message)
    if it is finished; a loop still waiting on commands is resumed without one.

    `journal` (a `Journal`, or a path to open one at) gets every event the loop records, and a
    call's start is made durable before the call runs. A journal that already holds a run
    resumes it: give the same prompt or none (another raises `ValueError`). A journal given
    open is left open; one opened from a path is closed. `loop=` and `journal=` exclude each
    other (`ValueError`).

    `approve` answers approval requests; without it they are returned in `Run.waiting`.
    `clock` stamps observations; `sleep` waits out a retry's `CallModel.not_before` on that
    clock (a fake pair makes tests and replays instant). `deps` reaches every tool that asks for
    a `ToolContext`, as its `deps`, and nothing else (no journal, no model). `on_event` sees
    each event once the loop has recorded it (and the journal has it): a dump taken there is
    the state as it is. `on_update` sees what a UI shows, as it happens (`Update`: a streamed
    reply's deltas, tools started and finished, approvals needed, retries, the finish).
    `on_step` sees every command, and every observation of what the world did, each once the
    loop has recorded it (a `RunTool` once its start is): a dump taken there, as in `on_event`,
    never runs a call twice that is not replay-safe.

    Raises `TypeError` at once for a `model` that is not a sync `ModelClient`, or given twice.
    """
    spec, model, tools = unpacked(spec, model, tools, is_async=False)
    check_model(model, can_await=False)
    runner = as_runner(tools)
    run_call = caller(runner, deps)
    on_delta = on_update if on_update is not None and takes(model.complete, "on_delta") else None
    with opened(journal, loop) as journaled:
        session = Session(
            spec,
            prompt,
            loop=loop,
            tool_specs=runner.specs,
            clock=clock,
            journal=journaled,
            on_event=on_event,
            on_update=on_update,
        )
        now = session.now
        pending = deque(session.start())
        while pending:
            command = pending.popleft()
            if not session.begin(command):
                continue  # the loop closed its call since (the deadline passed, say)
            if on_step is not None:  # a tool's start recorded first: a dump never lags
                on_step(command)
            match command:
                case Finish():
                    return Run(session.loop, command)
                case CallModel():
                    if (wait := session.wait(command)) > 0:
                        sleep(wait)
                    session.calling(command)
                    obs = call_model(model, command, now, sleep, on_delta)
                case RunTool(id=call_id):
                    outcome = run_call(command)
                    obs = ToolReturned(call_id, outcome.content, outcome.is_error, now=now())
                case AwaitApproval():
                    if approve is None:
                        session.waiting.append(command)
                        continue
                    obs = answer(command, approve(command), now())
                case _:
                    raise TypeError(f"unknown command {command!r}")
            commands = session.send(obs)
            if on_step is not None:  # once recorded: a dump taken there holds it
                on_step(obs)
            pending.extend(commands)
        return session.run()
