"""The plain synchronous executor: one command at a time, tools run inline.

It carries out what the loop decides and nothing more. Tools run one after another (use the trio
executor to overlap them); a sync tool cannot be interrupted, so per-tool timeouts need the
sandbox.
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
    Message,
    ModelReplied,
    Observation,
    RunTool,
    Tool,
    ToolReturned,
    ToolStarted,
)

from ._protocols import ModelClient, ToolRunner
from ._run import (
    JournalArg,
    Run,
    answer,
    check_model,
    model_failed,
    opened,
    prepare,
    renamed_state,
)
from ._toolbox import as_runner, caller

Approver = Callable[[AwaitApproval], "bool | str"]


def call_model(
    model: ModelClient,
    command: CallModel,
    now: Callable[[], float],
    sleep: Callable[[float], object] = time.sleep,
) -> Observation:
    """One model call as an observation, sent no sooner than its `not_before` (waiting with
    `sleep`); a failure of any kind becomes `ModelFailed`."""
    if command.not_before is not None:
        wait = command.not_before - now()
        if wait > 0:
            sleep(wait)
    try:
        response = model.complete(command.request)
    except Exception as e:
        return model_failed(command.id, e, now())
    return ModelReplied(command.id, response, now=now())


def run(
    spec: LoopSpec,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: ModelClient,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    loop: Loop | None = None,
    journal: JournalArg = None,
    approve: Approver | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    on_event: Callable[[Event], None] | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
    state: Loop | None = None,
) -> Run:
    """Drive a loop until it finishes, or until only human approvals are left to wait for.

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
    clock (a fake pair makes tests and replays instant). `on_event` sees each event once the
    loop has recorded it (and the journal has it): a dump taken there is the state as it is.
    `on_step` sees every command, and every observation of what the world did. `state` is the
    deprecated name of `loop`.

    Raises `TypeError` at once for a `model` that is not a sync `ModelClient`.
    """
    check_model(model, can_await=False)
    resumed = renamed_state(loop, state)
    runner = as_runner(tools)
    run_call = caller(runner)
    with opened(journal, resumed) as journaled:
        record, now = prepare(spec, runner, prompt, resumed, clock, journaled, on_event)
        pending = deque(record.first(now()))
        waiting: list[AwaitApproval] = []
        while pending:
            command = pending.popleft()
            if on_step is not None:
                on_step(command)
            match command:
                case Finish():
                    return Run(record.loop, command)
                case CallModel():
                    record.commit()
                    obs = call_model(model, command, now, sleep)
                case RunTool(id=call_id):
                    record.send(ToolStarted(call_id, now=now()))
                    record.commit()
                    outcome = run_call(command)
                    obs = ToolReturned(call_id, outcome.content, outcome.is_error, now=now())
                case AwaitApproval():
                    if approve is None:
                        waiting.append(command)
                        continue
                    obs = answer(command, approve(command), now())
                case _:
                    raise TypeError(f"unknown command {command!r}")
            if on_step is not None:
                on_step(obs)
            pending.extend(record.send(obs))
        return Run(record.loop, None, waiting)
