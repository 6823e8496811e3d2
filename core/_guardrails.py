"""Guardrails: named checks the loop asks its executor to run on a run's input, on each tool
call before it runs, and on the final answer; `@guardrail` binds a function to one.

A `Guardrail` is data (its name and what it checks), as a `ToolSpec` is: the spec lists them,
the loop asks for each with a `CheckGuardrail` command and takes its answer as a
`GuardrailChecked` observation. The function is the executor's to call, never the core's.
"""

from __future__ import annotations

__all__ = ["Guardrail", "GuardrailFunction", "GuardrailKind", "guardrail"]

import inspect
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ._fields import check_fields

GuardrailKind = Literal["input", "tool_call", "final"]
"""What a guardrail checks: the run's input messages (beside its first model call), each tool
call (before it runs), or the final answer (before the run finishes with it)."""


class Guardrail(msgspec.Struct, frozen=True, omit_defaults=True):
    """A named check of kind `on`; a tripped check finishes the run (`StopReason.guardrail`)."""

    name: str
    on: GuardrailKind

    def __post_init__(self) -> None:
        check_fields(self)


class GuardrailFunction:
    """A function with its `Guardrail`, as `@guardrail` makes it. The function takes the
    check's subject (`CheckGuardrail.subject`) and returns None (or False, or "") to pass, or
    a message (or True) to trip; one that raises trips, so a broken check fails closed."""

    def __init__(self, fn: Callable[[Any], Any], spec: Guardrail) -> None:
        self.fn = fn
        self.spec = spec
        self.name = spec.name
        self.is_async = inspect.iscoroutinefunction(fn)

    def __call__(self, subject: Any) -> Any:
        return self.fn(subject)

    def __repr__(self) -> str:
        return f"<guardrail {self.name} on {self.spec.on}>"


def guardrail(
    *, on: GuardrailKind, name: str | None = None
) -> Callable[[Callable[[Any], Any]], GuardrailFunction]:
    """Make a function a guardrail on `on` (`"input"`, `"tool_call"` or `"final"`), named
    `name` or the function's name: give it to `LoopSpec(guardrails=...)` and to the run."""

    def wrap(fn: Callable[[Any], Any]) -> GuardrailFunction:
        return GuardrailFunction(fn, Guardrail(name or fn.__name__, on))

    return wrap
