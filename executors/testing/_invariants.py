"""The promises a simulation checks after every step of every seed, and at the end: each a
function of the world and its session, returning None or (the invariant's name, what broke)."""

from __future__ import annotations

__all__ = ["finals", "step_checks"]

from collections.abc import Callable, Collection, Sequence
from typing import Any

import msgspec
from turnstile.core import (
    InvalidHistory,
    Loop,
    LoopState,
    ModelReplied,
    Started,
    StopReason,
    TurnstileError,
)
from turnstile.core.messages import AssistantMessage, ToolCall, ToolResults, validate_history
from turnstile.executors._run import Run
from turnstile.executors._session import Session

from ._world import Check, World

DEADLINE_GRACE_S = 120.0
"""How long past its deadline a run may take to finish: the final answer's call, its retries."""

Broken = tuple[str, str] | None


def _history(world: World, session: Session) -> Broken:
    state = session.loop.state
    try:
        validate_history(state.messages, allow_pending=state.phase != "done")
    except InvalidHistory as e:
        return "history_valid", "; ".join(str(p) for p in e.problems)
    return None


def _round_trip(world: World, session: Session) -> Broken:
    loop = session.loop
    dumped = loop.dump()
    try:
        if Loop.load(loop.spec, dumped).dump() != dumped:
            return "dump_load_replay", "the state loaded from its dump dumps differently"
        if Loop.replay(loop.spec, loop.state.events).dump() != dumped:
            return "dump_load_replay", "the state replayed from its events differs"
    except TurnstileError as e:
        return "dump_load_replay", f"{type(e).__name__}: {e}"
    return None


def _started_once(world: World, session: Session) -> Broken:
    safe = {t.name for t in session.loop.spec.tools if t.replay_safe}
    names = _call_names(session.loop.state)
    for call_id, count in world.invocations.items():
        if count > 1 and names.get(call_id) not in safe:
            return (
                "no_double_start",
                f"the call {call_id} ({names.get(call_id)}), not replay-safe, ran {count} times",
            )
    return None


def _budgets(world: World, session: Session) -> Broken:
    loop = session.loop
    state, guards = loop.state, loop.spec.guards
    if guards.max_turns is not None and state.turns > guards.max_turns + 1:  # +1: the final
        return "budgets", f"{state.turns} turns, past max_turns={guards.max_turns}"
    deadline = loop.next_deadline()
    if deadline is not None and world.now > deadline + DEADLINE_GRACE_S:
        return "budgets", f"still running at {world.now:g} s, past the deadline at {deadline:g} s"
    if _replies_past_budget(loop) > 1:  # 1: the final answer's call
        return "budgets", f"the model was asked again past max_cost={guards.max_cost:g}"
    return None


def _replies_past_budget(loop: Loop) -> int:
    """How many replies of the current run came once its cost had reached `Guards.max_cost`,
    each priced by the loop itself: its events replayed under the spec without that budget,
    so a log that ignored the budget replays too."""
    budget = loop.spec.guards.max_cost
    if budget is None:
        return 0
    guards = msgspec.structs.replace(loop.spec.guards, max_cost=None)
    replayed = Loop(msgspec.structs.replace(loop.spec, guards=guards))
    past = 0
    try:
        for event in loop.state.events:
            if type(event) is Started:
                past = 0
                replayed.start(event.messages, event.now, event.tools)
                continue
            past += type(event) is ModelReplied and replayed.state.cost >= budget
            replayed.send(event)
    except TurnstileError:
        return 0  # a log that does not replay: `dump_load_replay` says so
    return past


def _answered(world: World, session: Session) -> Broken:
    state = session.loop.state
    answered = {r.call_id for m in state.messages if type(m) is ToolResults for r in m.results}
    missing = sorted(set(_call_names(state)) - answered)
    if missing:
        return "every_call_answered", f"no result for {', '.join(missing)}"
    return None


def _named_stop(world: World, session: Session) -> Broken:
    if session.finish is None or session.finish.reason is StopReason.unknown:
        return "named_stop", "the run ended without a stop reason"
    return None


def _call_names(state: LoopState) -> dict[str, str]:
    return {
        p.id: p.name
        for m in state.messages
        if type(m) is AssistantMessage
        for p in m.content
        if type(p) is ToolCall
    }


def _named(fn: Callable[..., Any], index: int) -> str:
    name = getattr(fn, "__name__", "")
    return name if name and name != "<lambda>" else f"invariants[{index}]"


def _user(fn: Callable[[LoopState], object], name: str) -> Check:
    def check(world: World, session: Session) -> Broken:
        try:
            held = fn(session.loop.state)
        except AssertionError as e:
            return name, str(e) or "it raised AssertionError"
        return None if held is not False else (name, (fn.__doc__ or "it returned False").strip())

    return check


def _expected(expect: Callable[[Run], object] | Collection[StopReason]) -> Check:
    def check(world: World, session: Session) -> Broken:
        run = session.run()
        if callable(expect):
            try:
                held = expect(run)
            except AssertionError as e:
                return "expected_outcome", str(e) or "it raised AssertionError"
            if held is False:
                return "expected_outcome", f"the run stopped with {run.stop_reason.value}"
            return None
        if run.stop_reason not in expect:
            wanted = ", ".join(sorted(r.value for r in expect))
            return (
                "expected_outcome",
                f"the run stopped with {run.stop_reason.value}, expected {wanted}",
            )
        return None

    return check


def step_checks(invariants: Sequence[Callable[[LoopState], object]]) -> list[Check]:
    """What holds after every step: the built-in promises, then the user's `invariants`."""
    user = [_user(fn, _named(fn, i)) for i, fn in enumerate(invariants)]
    return [_history, _round_trip, _started_once, _budgets, *user]


def finals(expect: Callable[[Run], object] | Collection[StopReason] | None) -> list[Check]:
    """What holds once the run ends: every call answered, a named stop, what was expected."""
    return [_answered, _named_stop, *([] if expect is None else [_expected(expect)])]
