"""The plain synchronous executor: one command at a time, tools inline, one after another (`aio`
overlaps them); a sync tool cannot be interrupted, so per-tool timeouts need the sandbox."""

from __future__ import annotations

__all__ = ["call_model", "run"]

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from turnstile.core import (
    CallModel,
    CheckGuardrail,
    Command,
    Event,
    Loop,
    LoopSpec,
    Observation,
    RunTool,
    Tool,
)
from turnstile.core.guardrails import GuardrailFunction
from turnstile.core.messages import Message

from ._agent import Agent, agent_guardrails, parenting, unpacked
from ._effects import Approver, JournalArg, answer, call_model, opened, returned
from ._events import Update
from ._guardrails import Guardrails, as_guardrails
from ._protocols import ModelClient, ToolRunner, takes
from ._run import Run
from ._session import Session
from ._toolbox import as_runner, caller


def run(
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None = None,
    *,
    model: ModelClient | str | None = None,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    guardrails: Guardrails | Sequence[GuardrailFunction] = (),
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

    `model` is a sync `ModelClient` (anything else: `TypeError` at once), or a model string
    (`"openai:gpt-4.1"`, see `turnstile.providers.model_client`); `spec` may be an `Agent`,
    which brings its model and tools (then `model=` and `tools=` are not given again).
    `approve` answers approval requests, else they are returned in `Run.waiting`. `sleep` waits
    out a retry's `not_before` on `clock` (a fake pair: instant tests). `guardrails`: the
    functions `@guardrail` made, for the spec's guardrails (a spec that names none is given
    them); each check runs here, between the model call and the calls it holds back (a spec's
    guardrail without a function: `ValueError`). `deps` reaches every tool
    that asks for a `ToolContext` (as its `deps`), nothing else. `journal` is a `Journal` (left
    open) or a path (opened, and closed here); not with `loop`. Starting or resuming, and what
    `on_event`, `on_update`, `on_step` see: `turnstile.executors.Session`, which this drives.
    """
    rails = as_guardrails(agent_guardrails(spec, guardrails))
    spec, model, tools = unpacked(spec, model, tools, is_async=False)
    spec = rails.bound(spec)
    run_call = caller(runner := as_runner(tools), deps, lambda: session.loop.state.events)
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
            on_step=on_step,
        )
        on_delta = session.on_delta if takes(model.complete, "on_delta") else None
        queue = session.start()
        with parenting(
            session, model, run, approve
        ):  # its sub-agents' calls run their children here
            while (command := session.next(queue, approve is not None)) is not None:
                match command:
                    case CallModel():
                        if (wait := session.wait(command)) > 0:
                            sleep(wait)
                        session.calling(command)
                        obs = call_model(model, command, session.now, on_delta=on_delta)
                    case RunTool():
                        obs = returned(command, run_call(command), session.now())
                    case CheckGuardrail():
                        obs = rails.check(command, session.now())
                    case _:  # an approval: `next` hands one out only to an approver
                        assert approve is not None
                        obs = answer(command, approve(command), session.now())
                queue += session.send(obs)
        return session.run()
