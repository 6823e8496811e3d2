"""`Guardrails`: the functions of a run's guardrails by name, and a check's answer as an
observation. A check that raises, or that names no function the run was given, trips: a
guardrail fails closed."""

from __future__ import annotations

__all__ = ["Guardrails", "as_guardrails", "checked"]

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from turnstile.core import CheckGuardrail, GuardrailChecked, LoopSpec
from turnstile.core.guardrails import Guardrail, GuardrailFunction


class Guardrails:
    """The functions `@guardrail` made, by name (`run(..., guardrails=[...])`)."""

    def __init__(self, functions: Iterable[GuardrailFunction] = ()) -> None:
        self._functions: dict[str, GuardrailFunction] = {}
        for f in functions:
            if not isinstance(f, GuardrailFunction):
                raise TypeError(f"{f!r} is not a guardrail: decorate it with @guardrail(on=...)")
            if f.name in self._functions:
                raise ValueError(f"two guardrails are named {f.name!r}")
            self._functions[f.name] = f

    @property
    def specs(self) -> tuple[Guardrail, ...]:
        return tuple(f.spec for f in self._functions.values())

    def bound(self, spec: LoopSpec) -> LoopSpec:
        """`spec` with these guardrails if it names none; else `ValueError` for one of its
        guardrails without a function here (a check no one runs would hold the run forever)."""
        if not spec.guardrails:
            return msgspec.structs.replace(spec, guardrails=self.specs) if self._functions else spec
        missing = sorted({g.name for g in spec.guardrails} - set(self._functions))
        if missing:
            raise ValueError(f"guardrails without a function: {', '.join(missing)}")
        return spec

    def check(self, command: CheckGuardrail, now: float) -> GuardrailChecked:
        """Run a sync check here (an async one: `acheck`)."""
        f = self._functions.get(command.name)
        if f is None or f.is_async:
            return self._missing(command, now) if f is None else _tripped(command, "is async", now)
        try:
            verdict = f(command.subject)
        except Exception as e:
            return _raised(command, e, now)
        return checked(command, verdict, now)

    async def acheck(self, command: CheckGuardrail, now: Any) -> GuardrailChecked:
        """Run a check: an async one awaited, a sync one in a worker thread. `now`: the clock."""
        import anyio.to_thread

        f = self._functions.get(command.name)
        if f is None:
            return self._missing(command, now())
        try:
            if f.is_async:
                verdict = await f(command.subject)
            else:
                verdict = await anyio.to_thread.run_sync(f, command.subject)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as e:
            return _raised(command, e, now())
        return checked(command, verdict, now())

    def _missing(self, command: CheckGuardrail, now: float) -> GuardrailChecked:
        return _tripped(command, "has no function in this run", now)


def checked(command: CheckGuardrail, verdict: object, now: float) -> GuardrailChecked:
    """A guardrail function's verdict as the check's answer: None, False or "" passes; a
    message (or True) trips."""
    if verdict is None or verdict is False or verdict == "":
        return GuardrailChecked(command.id, False, now=now)
    message = verdict if isinstance(verdict, str) else ""
    return GuardrailChecked(command.id, True, message, now=now)


def _raised(command: CheckGuardrail, e: BaseException, now: float) -> GuardrailChecked:
    return _tripped(command, f"raised {type(e).__name__}: {e}", now)


def _tripped(command: CheckGuardrail, why: str, now: float) -> GuardrailChecked:
    return GuardrailChecked(command.id, True, f"the guardrail {command.name} {why}", now=now)


def as_guardrails(given: Guardrails | Sequence[GuardrailFunction]) -> Guardrails:
    return given if isinstance(given, Guardrails) else Guardrails(given)
