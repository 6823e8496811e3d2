"""`Run`: what an executor hands back — the loop, how it finished, and what still waits."""

from __future__ import annotations

__all__ = [
    "Failure",
    "JournalArg",
    "Recorder",
    "Run",
    "RunFailed",
    "answer",
    "check_model",
    "check_prompt",
    "model_failed",
    "opened",
    "prepare",
    "renamed_state",
]

import contextlib
import inspect
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Command,
    Denied,
    Event,
    Finish,
    InvalidObservation,
    Loop,
    LoopSpec,
    LoopState,
    ModelError,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    RunTool,
    Started,
    StopReason,
    ToolSpec,
    TurnstileError,
)
from turnstile.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
)

from ._events import ModelCallStarted, Narrator, Update
from ._logs import logged
from ._protocols import AsyncModelClient, ModelClient, ToolRunner
from ._transcript import transcript

if TYPE_CHECKING:
    from ._journal import Journal

JournalArg: TypeAlias = "Journal | str | os.PathLike[str] | None"


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
    round after round, or answers that never matched the spec's output; None for any other
    end (a limit the spec set, a cancel, the model's own stop)."""
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
        """The run's answer: `Finish.output` (typed, when the spec types it), else the state's."""
        return self.finish.output if self.finish is not None else self.loop.state.output

    @property
    def messages(self) -> list[Message]:
        return self.loop.state.messages

    @property
    def error(self) -> Failure | None:
        """Why the run failed, if it did: a model call that failed for good (`model_error`),
        tools failing round after round (`tool_errors`), no valid answer (`invalid_output`)."""
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


def check_prompt(prompt: str | Sequence[Message] | None, resumed: Loop | None) -> None:
    """A prompt starts a run: on a new loop, an idle one, or a finished one (whose conversation
    it goes on with); a loop still waiting on commands is resumed without one."""
    if resumed is None:
        if prompt is None:
            raise ValueError("run() needs a prompt, or a loop or a journal to resume")
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


def _journaled_prompt(prompt: str | Sequence[Message] | None, events: Sequence[Event]) -> None:
    """A journal that holds a run resumes it: the prompt, if given, must be the one it started
    from (the same call, made again after a crash), else the journal is not this run's."""
    if prompt is None:
        return
    given = [UserMessage(prompt)] if isinstance(prompt, str) else list(prompt)
    last = next(e for e in reversed(events) if type(e) is Started)
    if given != last.messages:
        raise ValueError(
            "the journal holds a run started from another prompt: to resume it, give the same "
            "prompt or none; to start another run, give another journal"
        )


def _with_tools(spec: LoopSpec, runner: ToolRunner) -> LoopSpec:
    """A spec without tools gets the runner's; a spec's tools must all have an implementation."""
    specs = runner.specs
    if not spec.tools and specs:
        return msgspec.structs.replace(spec, tools=tuple(specs))
    missing = sorted({t.name for t in spec.tools} - {s.name for s in specs})
    if missing:
        raise ValueError(f"tools without an implementation: {', '.join(missing)}")
    return spec


@contextlib.contextmanager
def opened(journal: JournalArg, resumed: Loop | None) -> Iterator[Journal | None]:
    """The journal to write: one given open (made durable on the way out, left open), or the
    one at a path (opened here with the default policy, and closed on the way out).

    Raises `ValueError` for a journal given with a loop to resume: a journal holds its own.
    """
    if journal is not None and resumed is not None:
        raise ValueError("run() takes loop= or journal=, not both: a journal holds its own loop")
    if journal is None:
        yield None
    elif isinstance(journal, str | os.PathLike):
        from ._journal import Journal

        with Journal(journal) as at_path:
            try:
                yield at_path
            finally:
                at_path.commit()
    else:
        try:
            yield journal
        finally:
            journal.commit()


class Recorder:
    """The loop an executor drives, and what becomes of each event it records: appended to the
    journal (if any), then shown to `on_event`. Executors send through it, never to the loop."""

    __slots__ = (
        "_journal",
        "_narrator",
        "_on_event",
        "_prompt",
        "_tools",
        "_written",
        "delta",
        "loop",
    )

    def __init__(
        self,
        loop: Loop,
        prompt: str | Sequence[Message] | None,
        journal: Journal | None,
        on_event: Callable[[Event], None] | None,
        tools: Sequence[ToolSpec] = (),
        *,
        on_update: Callable[[Update], object] | None = None,
    ) -> None:
        self.loop = loop
        self._prompt = prompt
        self._journal = journal
        self._on_event = on_event
        self._tools = tools  # the runner's, for a spec without: the run's Started records them
        self._written = len(loop.state.events)
        self._narrator = None if on_update is None else Narrator(on_update, loop)
        self.delta = on_update
        """What a model call's deltas go to (the caller's `on_update`), if anything."""

    def first(self, now: float) -> list[Command]:
        """What to carry out first: the run the prompt starts (on a new or idle loop, or going on
        with a finished loop's conversation); else the loop is told it was `Resumed` (a finished
        one has nothing left to do)."""
        if self._prompt is not None:
            commands = self.loop.start(self._prompt, now, self._tools)
            self._record(commands)
            return commands
        if self.loop.state.phase == "done":
            commands = self.loop.outstanding_commands()
            self._record(commands)
            return commands
        return self.send(Resumed(now=now))

    def send(self, obs: Observation) -> list[Command]:
        try:
            commands = self.loop.send(obs)
        except InvalidObservation as e:  # the loop is left as it was
            if type(obs) is not ModelReplied or e.path == "now":  # else the response's fault
                raise
            # what the client returned is not a ModelResponse: its bug, final as if it raised
            message = f"the model client's reply is not a valid reply ({e})"
            commands = self.loop.send(ModelFailed(obs.command_id, message, False, now=obs.now))
        self._record(commands)
        return commands

    def calling(self, command: CallModel) -> None:
        """The model call `command` is about to be sent (after any wait it asked for)."""
        if self._narrator is not None:
            self._narrator.show(ModelCallStarted(command.id))

    def commit(self) -> None:
        """Make everything journaled durable: done before any effect (a call, a request)."""
        if self._journal is not None:
            self._journal.commit()

    def _record(self, commands: list[Command]) -> None:
        events = self.loop.state.events
        new = events[self._written :]
        self._written = len(events)
        if self._journal is not None:
            for event in new:
                self._journal.append(event)
        logged(self.loop, new)
        if self._on_event is not None:
            for event in new:
                self._on_event(event)
        if self._narrator is not None:
            self._narrator.recorded(self.loop, new)
            self._narrator.commands(self.loop, commands)


def prepare(
    spec: LoopSpec,
    runner: ToolRunner,
    prompt: str | Sequence[Message] | None,
    resumed: Loop | None,
    clock: Callable[[], float],
    journal: Journal | None = None,
    on_event: Callable[[Event], None] | None = None,
    *,
    on_update: Callable[[Update], object] | None = None,
) -> tuple[Recorder, Callable[[], float]]:
    """The loop to drive (fresh, resumed, or rebuilt from the journal's events) and the clock to
    stamp observations with.

    A spec without tools gets the runner's, and a run started so records them (in its
    `Started` event). A resumed loop's clock continues from its last
    event, so the time a dumped state spent at rest (waiting for a human, say) is not counted.
    Raises `ValueError` for a prompt the loop cannot start from, or none where it needs one.
    """
    tools = () if spec.tools else tuple(runner.specs)
    spec = _with_tools(spec, runner)
    if journal is not None and journal.events:
        _journaled_prompt(prompt, journal.events)
        prompt, resumed = None, journal.loop(spec)
    check_prompt(prompt, resumed)
    if resumed is None:
        return Recorder(Loop(spec), prompt, journal, on_event, tools, on_update=on_update), clock
    loop = Loop(spec, resumed.state)
    offset = loop.resume_offset(clock())
    recorder = Recorder(loop, prompt, journal, on_event, tools, on_update=on_update)
    return recorder, (lambda: clock() + offset) if offset else clock


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
            "turnstile.executors.aio.run needs an AsyncModelClient (async acomplete(request) -> "
            "ModelResponse) or a ModelClient (complete(request) -> ModelResponse), got "
            + _described(model)
        )
    if isinstance(model, ModelClient) and is_async is not True:
        return
    if is_async is True or isinstance(model, AsyncModelClient):
        raise TypeError(
            f"{model!r} is async: sync.run calls complete(request); give the client a sync SDK "
            "client, or run it with turnstile.executors.aio (under asyncio or trio)"
        )
    raise TypeError(
        "sync.run needs a ModelClient (complete(request) -> ModelResponse), got "
        + _described(model)
    )


def model_failed(command_id: str, exc: BaseException, now: float) -> ModelFailed:
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
            model=exc.model,
            status=exc.status,
            now=now,
        )
    return ModelFailed(command_id, f"{type(exc).__name__}: {exc}", False, now=now)


def answer(command: AwaitApproval, decision: bool | str, now: float) -> Observation:
    """An approver's decision: True approves; False or a reason denies."""
    if decision is True:
        return Approved(command.id, now=now)
    return Denied(command.id, decision if isinstance(decision, str) else "", now=now)
