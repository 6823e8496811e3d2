"""What executors share in carrying out commands: the journal a `run` writes, the model it may
call, a model call made in this thread, a failed call and an approver's decision as
observations."""

from __future__ import annotations

__all__ = [
    "Approver",
    "Decision",
    "Edit",
    "JournalArg",
    "answer",
    "call_model",
    "check_model",
    "has_method",
    "is_async",
    "model_failed",
    "opened",
    "returned",
]

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Denied,
    Loop,
    ModelError,
    ModelFailed,
    ModelReplied,
    Observation,
    RunTool,
    ToolOutcome,
    ToolReturned,
)
from turnstile.providers import Delta

from ._invoke import sync_failure
from ._protocols import AsyncModelClient, ModelClient

if TYPE_CHECKING:
    from ._journal import Journal

JournalArg: TypeAlias = "Journal | str | os.PathLike[str] | None"


class Edit(msgspec.Struct, frozen=True):
    """What an approver returns to approve a call with `arguments` in place of the model's:
    they must fit the tool's schema (`ToolSpec.arguments_problem`), else the loop refuses them
    with `InvalidObservation` and the run is left as it was, still waiting on the call."""

    arguments: dict[str, Any]


Decision: TypeAlias = "bool | str | Edit"
"""An approver's answer: True approves, False or a reason (a str) denies, an `Edit` approves
with other arguments."""
Approver: TypeAlias = Callable[[AwaitApproval], Decision]


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


def _described(model: object) -> str:
    if inspect.isfunction(model) or inspect.ismethod(model):
        name = model.__name__
        shown = "fn" if name == "<lambda>" else name
        return f"the function {name} (ScriptedModel({shown}) makes a client of a function)"
    return repr(model)


def has_method(model: object, name: str) -> bool:
    """Whether `model` has the method `name`: what `isinstance` against a runtime protocol of
    that one method says when it says yes, without its cost (it reads the protocol's members
    at every call: tens of µs, a run's whole overhead under load)."""
    return getattr(model, name, None) is not None


def check_model(model: object, *, can_await: bool) -> None:
    """Raise `TypeError`, before anything runs, for a model an executor cannot call: not a
    client at all, or (for an executor that cannot await, `can_await=False`) an async one."""
    is_async = getattr(model, "is_async", None)
    if can_await:
        if has_method(model, "acomplete") or has_method(model, "complete"):
            return
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


def call_model(
    model: ModelClient,
    command: CallModel,
    now: Callable[[], float],
    *,
    on_delta: Callable[[Delta], object] | None = None,
) -> Observation:
    """One model call, made in this thread, as an observation: a failure of any kind becomes
    `ModelFailed`. `on_delta` goes to a client whose `complete` takes it. The caller waits out
    the command's `not_before` first (`Session.wait` says how long)."""
    streamed = {} if on_delta is None else {"on_delta": on_delta}
    try:
        response = model.complete(command.request, **streamed)
    except BaseException as e:  # no one cancels a sync call: a cancel is the client's failure
        if not sync_failure(e):
            raise
        return model_failed(command.id, e, now())
    return ModelReplied(command.id, response, now=now())


def returned(command: RunTool, outcome: ToolOutcome, now: float) -> ToolReturned:
    """A tool call's outcome as an observation."""
    return ToolReturned(command.id, outcome.content, outcome.is_error, now=now)


def answer(command: AwaitApproval, decision: Decision, now: float) -> Observation:
    """An approver's decision: True approves; an `Edit` approves with its arguments; False or
    a reason denies."""
    if decision is True:
        return Approved(command.id, now=now)
    if type(decision) is Edit:
        return Approved(command.id, arguments=decision.arguments, now=now)
    return Denied(command.id, decision if isinstance(decision, str) else "", now=now)


def is_async(fn: Callable[..., object]) -> bool:
    """Whether calling `fn` gives an awaitable: a coroutine function, or an object whose
    `__call__` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  # an object whose __call__ is async
    )
