"""`Run`: what an executor hands back — the loop, how it finished, and what still waits."""

from __future__ import annotations

__all__ = ["Failure", "Run", "RunFailed"]

from typing import Any

import msgspec
from turnstile.core import (
    AwaitApproval,
    Finish,
    Loop,
    LoopState,
    ModelFailed,
    StopReason,
    TurnstileError,
)
from turnstile.core.messages import AssistantMessage, Message, ToolCall, ToolResults, Usage

from ._transcript import transcript


class Failure(msgspec.Struct, frozen=True):
    """Why a run failed (`Run.error`), read from what the loop recorded, so a loaded or
    replayed run tells the same. `reason` is how it stopped; `kind` what the provider called a
    model failure (`authentication_error`), else the reason; `status` its HTTP status;
    `retryable` whether asking again later may succeed; `model` the model that failed."""

    reason: StopReason
    kind: str
    message: str
    status: int | None = None
    retryable: bool = False
    model: str | None = None


class RunFailed(TurnstileError):
    """`Run.raise_for_error()`: the run ended in a failure, which `error` describes."""

    def __init__(self, error: Failure) -> None:
        self.error = error
        model = "" if error.model is None else f", model {error.model}"
        super().__init__(f"the run failed ({error.reason.value}{model}): {error.message}")


def _failure(state: LoopState) -> Failure | None:
    """The failure the run ended in: a model call that failed for good, tools that failed
    round after round, a guardrail that tripped (`kind` its name), or answers that never
    matched the spec's output; None for any other end (a limit the spec set, a cancel, the
    model's own stop)."""
    reason = state.stop_reason
    if reason is StopReason.model_error:
        for event in reversed(state.events):
            if type(event) is ModelFailed:
                return Failure(
                    reason=reason,
                    kind=event.kind or reason.value,
                    message=event.message,
                    status=event.status,
                    retryable=event.retryable,
                    model=event.model,
                )
    if reason is StopReason.tool_errors:
        last = next(m for m in reversed(state.messages) if type(m) is ToolResults)
        errors = [str(r.content) for r in last.results if r.is_error]
        message = f"tool calls failed {state.failed_rounds} rounds in a row; the last: "
        return Failure(reason=reason, kind=reason.value, message=message + "; ".join(errors))
    if reason is StopReason.guardrail and isinstance(state.output, dict):
        name, on, said = (str(state.output.get(k, "")) for k in ("guardrail", "on", "message"))
        return Failure(reason, name, f"the guardrail {name} ({on}) tripped: {said}")
    if reason is StopReason.invalid_output:
        tries = state.output_retries
        message = f"the model gave no answer the spec's output accepts in {tries} tries"
        return Failure(reason=reason, kind=reason.value, message=message)
    return None


class Run:
    """The outcome of driving a loop. `finish` is None while approvals in `waiting` are pending:
    dump `loop`, and resume later with the approver's answers.

    Its repr is its transcript, so `assert run == snapshot` stores the conversation readably.
    """

    __slots__ = ("children", "finish", "loop", "waiting")

    def __init__(
        self, loop: Loop, finish: Finish | None, waiting: list[AwaitApproval] | None = None
    ) -> None:
        self.loop = loop
        self.finish = finish
        self.waiting = waiting if waiting is not None else []
        self.children: dict[str, Run] = {}
        """The runs of its sub-agents' calls made in this process, by call id (`as_tool`)."""

    @property
    def state(self) -> LoopState:
        return self.loop.state

    @property
    def stop_reason(self) -> StopReason:
        return self.loop.state.stop_reason

    @property
    def output(self) -> Any:
        """The run's answer: `Finish.output` (typed, when the spec types it), else the state's."""
        return self.finish.output if self.finish is not None else self.loop.state.output

    @property
    def messages(self) -> list[Message]:
        return self.loop.state.messages

    @property
    def error(self) -> Failure | None:
        """Why the run failed, if it did: a model call that failed for good (`model_error`),
        tools failing round after round (`tool_errors`), a guardrail that tripped
        (`guardrail`), no valid answer (`invalid_output`)."""
        return _failure(self.loop.state)

    def raise_for_error(self) -> Run:
        """Raise `RunFailed` if the run ended in a failure (`error`); else return the run."""
        error = _failure(self.loop.state)
        if error is not None:
            raise RunFailed(error)
        return self

    @property
    def turns(self) -> int:
        return self.loop.state.turns

    @property
    def usage(self) -> Usage:
        """The tokens of every model call of the conversation, summed (`LoopState.usage`)."""
        return self.loop.state.usage

    @property
    def cost(self) -> float:
        """What those calls cost, by the spec's `prices` (`LoopState.cost`)."""
        return self.loop.state.cost

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
        """The run as text (`turnstile.executors.transcript`), its sub-agents' runs nested
        under their calls."""
        children = {call_id: run.transcript() for call_id, run in self.children.items()}
        return transcript(self.loop.state, children=children)

    def __repr__(self) -> str:
        return self.transcript()
