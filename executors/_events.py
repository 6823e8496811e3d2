"""What a run shows its caller as it goes: typed updates for a UI, from every executor alike.

The updates are drawn from what the loop records (the journal's events) and the commands it
hands out, in one place (`Narrator`, fed by the executors' `Recorder`), so sync, async and
sandboxed runs tell the same story. A streamed reply's deltas (the providers' `TextDelta`,
`ThinkingDelta`, `ArgumentsDelta`) join them as they arrive: the executor passes the model
client its `on_delta` for the call. Updates are frozen msgspec Structs tagged by `type`, so
`msgspec.json.encode(update)` is their wire form (server-sent events, a websocket).
"""

from __future__ import annotations

__all__ = [
    "Answering",
    "ApprovalNeeded",
    "ModelCallFailed",
    "ModelCallFinished",
    "ModelCallStarted",
    "ModelRetry",
    "Narrator",
    "OutputDelta",
    "RunFinished",
    "ToolCallFinished",
    "ToolCallStarted",
    "Update",
]

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import msgspec
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Command,
    Event,
    Finish,
    ModelFailed,
    ModelReplied,
    Started,
    StopReason,
    ToolSpec,
    ToolStarted,
)
from turnstile.core import Loop as _Loop
from turnstile.core.messages import (
    AssistantMessage,
    ModelStop,
    ResultPart,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    text_of,
)
from turnstile.core.request import OUTPUT_TOOL
from turnstile.core.state import CallStatus, PendingCall
from turnstile.providers import ArgumentsDelta, TextDelta, ThinkingDelta

from ._partial import partial_json


class _Update(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of the executors' own updates (the deltas are the providers')."""


class ModelCallStarted(_Update, frozen=True, tag="model_call_started"):
    """The model call `id` is being sent."""

    id: str


class ModelCallFinished(_Update, frozen=True, tag="model_call_finished"):
    """The model call `id` replied: its visible `text` (whole, streamed or not), why it stopped,
    and its tokens."""

    id: str
    text: str
    stop: ModelStop
    usage: Usage


class ModelCallFailed(_Update, frozen=True, tag="model_call_failed"):
    """The model call `id` failed; `retryable` as the provider said (the loop decides whether
    to retry, shown by a `ModelRetry`)."""

    id: str
    message: str
    kind: str = ""
    retryable: bool = False


class ModelRetry(_Update, frozen=True, tag="model_retry"):
    """The loop asks again, as the model call `id`, not before `not_before` (on the run's
    clock): the `attempt`-th retry in a row."""

    id: str
    attempt: int
    not_before: float


class ToolCallStarted(_Update, frozen=True, tag="tool_call_started"):
    """Every call the model made: as it starts running, or, for a call the loop answers itself
    (an unknown tool, arguments that are not JSON, a repeated id, a run that stops), just before
    its `ToolCallFinished`."""

    call_id: str
    name: str
    arguments: dict[str, Any]


class ToolCallFinished(_Update, frozen=True, tag="tool_call_finished"):
    """The call has its result: the tool's, or one the loop wrote (denied, a deadline, a
    cancel). Every call announced by `ToolCallStarted` or `ApprovalNeeded` gets exactly one."""

    call_id: str
    name: str
    content: str | list[ResultPart]
    is_error: bool = False


class ApprovalNeeded(_Update, frozen=True, tag="approval_needed"):
    """The call waits for a human's answer (the `approve` callback's, or the caller's later):
    what a UI shows to ask it, and to check an edit of its `arguments` with (`parameters`,
    the tool's JSON schema, as `ToolSpec.arguments_problem` does); `reason`, why it asks."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    reason: str = ""


class OutputDelta(_Update, frozen=True, tag="output_delta"):
    """The typed answer so far, while it streams (`LoopSpec.output`): what the JSON that came
    already says, as plain data (its strings as far as they came, its containers closed, a
    number or a key that may go on left out). Each is a prefix of the next; the answer itself
    is checked and typed when it is whole, as always."""

    partial: Any


class RunFinished(_Update, frozen=True, tag="run_finished"):
    reason: StopReason
    output: Any = None


Update: TypeAlias = (
    ModelCallStarted
    | TextDelta
    | ThinkingDelta
    | ArgumentsDelta
    | ModelCallFinished
    | ModelCallFailed
    | ModelRetry
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalNeeded
    | OutputDelta
    | RunFinished
)
"""Everything `on_update` may see; `msgspec.json.decode(data, type=Update)` reads one back."""


class Narrator:
    """Turns what a loop records and decides into `Update`s for `show`. Pure bookkeeping: the
    calls it announced and has not yet seen finish, so results the loop writes itself (a
    denial, a deadline, a call it never runs) are told too, and where in the ledger it has read
    to, so every call the model made is told once, started and finished."""

    __slots__ = ("_finished", "_open", "_read", "_tools", "show")

    def __init__(self, show: Callable[[Any], object], loop: _Loop) -> None:
        self.show = show
        self._open: dict[str, ToolCall] = {}
        self._finished: set[str] = set()  # calls of the round in flight already told finished
        self._read = len(loop.state.messages)  # a resumed run's earlier calls were told before
        started = next((e for e in reversed(loop.state.events) if type(e) is Started), None)
        self._tools = _by_name((started.tools if started else ()) or loop.spec.tools)

    def recorded(self, loop: _Loop, events: Sequence[Event]) -> None:
        """The events one step recorded, then the results it wrote, in the round in flight or
        in the ledger (a round it wrote in this step)."""
        show = self.show
        for event in events:
            match event:
                case ToolStarted(call_id=call_id):
                    p = self._find(loop, call_id)
                    if p is not None:
                        self._open[call_id] = p.call
                        show(ToolCallStarted(call_id, p.call.name, p.call.arguments))
                case Started(tools=tools):
                    self._tools = _by_name(tools or loop.spec.tools)
                case ModelReplied(command_id=key, response=r):
                    show(ModelCallFinished(key, text_of(r.content), r.stop, r.usage))
                case ModelFailed(command_id=key):
                    show(ModelCallFailed(key, event.message, event.kind, event.retryable))
        for p in loop.state.round:
            if p.status is CallStatus.done and p.result is not None:
                self._finish(p.call, p.result)
        messages = loop.state.messages
        for i in range(self._read, len(messages)):
            message = messages[i]
            if type(message) is ToolResults:
                asked = messages[i - 1]  # results always follow the reply that made the calls
                assert type(asked) is AssistantMessage
                calls = {c.id: c for c in asked.content if type(c) is ToolCall}
                for result in message.results:
                    self._finish(calls[result.call_id], result)
                self._finished.clear()
        self._read = len(messages)

    def _finish(self, call: ToolCall, result: ToolResult) -> None:
        """Tell `call` finished, once; a call never announced (the loop answered it without
        running it) is told started first."""
        if call.id in self._finished:
            return
        self._finished.add(call.id)
        if self._open.pop(call.id, None) is None:
            self.show(ToolCallStarted(call.id, call.name, call.arguments))
        self.show(ToolCallFinished(call.id, call.name, result.content, result.is_error))

    def commands(self, loop: _Loop, commands: Sequence[Command]) -> None:
        show = self.show
        for command in commands:
            match command:
                case CallModel(id=key, not_before=at) if at is not None:
                    show(ModelRetry(key, loop.state.retries, at))
                case AwaitApproval(id=call_id, name=name, arguments=arguments):
                    p = self._find(loop, call_id)
                    if p is not None:
                        self._open[call_id] = p.call
                    tool = self._tools.get(name, ToolSpec(name))
                    why = f"{name} needs a person's approval for every call (needs_approval)"
                    show(ApprovalNeeded(call_id, name, arguments, tool.description,
                                        tool.parameters, why))  # fmt: skip
                case Finish(reason=reason, output=output):
                    show(RunFinished(reason, output))

    @staticmethod
    def _find(loop: _Loop, call_id: str) -> PendingCall | None:
        for p in loop.state.round:
            if p.call.id == call_id:
                return p
        return None


def _by_name(tools: Sequence[ToolSpec]) -> dict[str, ToolSpec]:
    return {t.name: t for t in tools}


class Answering:
    """The caller's `on_update`, also told the typed answer so far (`OutputDelta`) while it
    streams: the answer tool's arguments, or (`native`) the reply's text. Each model call
    starts afresh; text that is no JSON says nothing."""

    __slots__ = ("_call", "_native", "_on_update", "_said", "_silent", "_text")

    def __init__(self, on_update: Callable[[Update], object], *, native: bool) -> None:
        self._on_update = on_update
        self._native = native
        self._text: list[str] = []
        self._said: Any = None
        self._silent = False
        self._call: str | None = None  # the answer tool's call followed (a reply's first)

    def __call__(self, update: Update) -> None:
        self._on_update(update)
        if type(update) is ModelCallStarted:
            self._text, self._said, self._silent, self._call = [], None, False, None
            return
        if self._silent:
            return
        if self._native and type(update) is TextDelta:
            self._text.append(update.text)
        elif not self._native and type(update) is ArgumentsDelta and update.name == OUTPUT_TOOL:
            if self._call is None:
                self._call = update.call_id
            elif update.call_id != self._call:
                return
            self._text.append(update.fragment)
        else:
            return
        try:
            partial = partial_json("".join(self._text))
        except ValueError:  # prose, not the answer
            self._silent = True
            return
        if partial is not None and partial != self._said:
            self._said = partial
            self._on_update(OutputDelta(partial))
