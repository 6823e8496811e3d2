"""`Run`: what an executor hands back — the loop, how it finished, and what still waits."""

from __future__ import annotations

__all__ = [
    "Run",
    "answer",
    "check_model",
    "first_commands",
    "model_failed",
    "prepare",
    "renamed_state",
]

import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from turnstile.core import (
    Approved,
    AssistantMessage,
    AwaitApproval,
    CallModel,
    Command,
    Denied,
    Finish,
    Loop,
    LoopSpec,
    LoopState,
    Message,
    ModelError,
    ModelFailed,
    Observation,
    RunTool,
    StopReason,
    ToolCall,
)

from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._transcript import transcript


class Run:
    """The outcome of driving a loop. `finish` is None while approvals in `waiting` are pending:
    dump `loop`, and resume later with the approver's answers.

    Its repr is its transcript, so `assert run == snapshot` stores the conversation readably.
    """

    __slots__ = ("finish", "loop", "waiting")

    def __init__(
        self, loop: Loop, finish: Finish | None, waiting: list[AwaitApproval] | None = None
    ) -> None:
        self.loop = loop
        self.finish = finish
        self.waiting = waiting if waiting is not None else []

    @property
    def state(self) -> LoopState:
        return self.loop.state

    @property
    def stop_reason(self) -> StopReason:
        return self.loop.state.stop_reason

    @property
    def output(self) -> Any:
        return self.loop.state.output

    @property
    def messages(self) -> list[Message]:
        return self.loop.state.messages

    @property
    def turns(self) -> int:
        return self.loop.state.turns

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every tool call the model made, in order, as (name, arguments)."""
        return [
            (part.name, part.arguments)
            for message in self.loop.state.messages
            if type(message) is AssistantMessage
            for part in message.content
            if type(part) is ToolCall
        ]

    def trajectory(self) -> list[str]:
        """The names of the tools the model called, in order."""
        return [name for name, _ in self.calls()]

    def transcript(self) -> str:
        return transcript(self.loop.state)

    def __repr__(self) -> str:
        return self.transcript()


def renamed_state(loop: Loop | None, state: Loop | None) -> Loop | None:
    """`run(loop=...)` was `run(state=...)`: the old name still works, with a warning."""
    if state is None:
        return loop
    warnings.warn("run(state=...) is now run(loop=...)", DeprecationWarning, stacklevel=3)
    if loop is not None:
        raise TypeError("run() takes loop= or state= (its old name), not both")
    return state


def _check_prompt(prompt: str | Sequence[Message] | None, resumed: Loop | None) -> None:
    """A prompt starts a run: on a new loop, an idle one, or a finished one (whose conversation
    it goes on with); a loop still waiting on commands is resumed without one."""
    if resumed is None:
        if prompt is None:
            raise ValueError("run() needs a prompt, or a loop to resume")
        return
    if prompt is None and resumed.state.phase == "idle":
        raise ValueError("the loop has not started: give it a prompt")
    shown = []
    for command in [] if prompt is None else resumed.outstanding_commands():
        match command:
            case RunTool(id=call_id, name=name) | AwaitApproval(id=call_id, name=name):
                shown.append(f"{call_id} ({name})")
            case CallModel(id=command_id):
                shown.append(command_id)
    if shown:
        raise ValueError(
            f"the loop still waits on {', '.join(shown)}: resume it without a prompt (a prompt "
            "starts a new run once the loop is finished)"
        )


def prepare(
    spec: LoopSpec,
    runner: ToolRunner,
    prompt: str | Sequence[Message] | None,
    resumed: Loop | None,
    clock: Callable[[], float],
) -> tuple[Loop, Callable[[], float]]:
    """The loop to drive (fresh, or resumed) and the clock to stamp observations with.

    A spec without tools gets the runner's. A resumed loop's clock continues from its last
    event, so the time a dumped state spent at rest (waiting for a human, say) is not counted.
    Raises `ValueError` for a prompt the loop cannot start from, or none where it needs one.
    """
    _check_prompt(prompt, resumed)
    specs = runner.specs
    if not spec.tools and specs:
        spec = msgspec.structs.replace(spec, tools=tuple(specs))
    else:
        missing = sorted({t.name for t in spec.tools} - {s.name for s in specs})
        if missing:
            raise ValueError(f"tools without an implementation: {', '.join(missing)}")
    if resumed is None:
        return Loop(spec), clock
    loop = Loop(spec, resumed.state)
    offset = loop.resume_offset(clock())
    return loop, (lambda: clock() + offset) if offset else clock


def _described(model: object) -> str:
    if inspect.isfunction(model) or inspect.ismethod(model):
        name = model.__name__
        shown = "fn" if name == "<lambda>" else name
        return f"the function {name} (ScriptedModel({shown}) makes a client of a function)"
    return repr(model)


def check_model(model: object, *, can_await: bool) -> None:
    """Raise `TypeError`, before anything runs, for a model an executor cannot call: not a
    client at all, or (for an executor that cannot await, `can_await=False`) an async one."""
    is_async = getattr(model, "is_async", None)
    if can_await:
        if isinstance(model, AsyncModelClient) or isinstance(model, ModelClient):
            return
        raise TypeError(
            "turnstile.executors.trio.run needs an AsyncModelClient (async acomplete(request) -> "
            "ModelResponse) or a ModelClient (complete(request) -> ModelResponse), got "
            + _described(model)
        )
    if isinstance(model, ModelClient) and is_async is not True:
        return
    if is_async is True or isinstance(model, AsyncModelClient):
        raise TypeError(
            f"{model!r} is async: sync.run calls complete(request); give the client a sync SDK "
            "client, or run it with turnstile.executors.trio"
        )
    raise TypeError(
        "sync.run needs a ModelClient (complete(request) -> ModelResponse), got "
        + _described(model)
    )


def first_commands(
    loop: Loop, prompt: str | Sequence[Message] | None, now: Callable[[], float]
) -> list[Command]:
    """What to carry out first: the run the prompt starts (on a new or idle loop, or going on
    with a finished loop's conversation), or, without one, what a resumed loop still waits on."""
    if prompt is None:
        return loop.outstanding_commands()
    return loop.start(prompt, now())


def model_failed(command_id: str, exc: Exception, now: float) -> ModelFailed:
    """A failed model call as an observation: `ModelError`s say whether to retry, what the
    provider called the failure and how long it asked to wait; anything else (a bug in a
    client) is final, but never loses the run's state."""
    if isinstance(exc, ModelError):
        return ModelFailed(
            command_id,
            exc.message,
            exc.retryable,
            kind=exc.kind,
            retry_after=exc.retry_after,
            now=now,
        )
    return ModelFailed(command_id, f"{type(exc).__name__}: {exc}", False, now=now)


def answer(command: AwaitApproval, decision: bool | str, now: float) -> Observation:
    """An approver's decision: True approves; False or a reason denies."""
    if decision is True:
        return Approved(command.id, now=now)
    return Denied(command.id, decision if isinstance(decision, str) else "", now=now)
