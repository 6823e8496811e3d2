"""The guardrails' side of a step (`Step` is a `Guarding`): a round or an answer held until
its checks answer, and what a check's answer decides. Each method reads the state and returns
a plan, as every deciding method does; `Step.apply` asks for the checks (`CheckGuardrail`).
"""

from __future__ import annotations

__all__ = ["Guarding"]

from typing import Any

from msgspec import UNSET

from ._commands import FinalAnswer, StopReason
from ._guardrails import Guardrail
from ._machine import CHECK, CHECKING
from ._messages import AssistantMessage, Message, ToolCall, text_of
from ._observations import GuardrailChecked, Started
from ._output import Output, typed
from ._plan import DEADLINE, WAITING, Plan, finish
from ._state import CallStatus, LoopState, PendingCall, PendingCheck

DONE, APPROVAL = CallStatus.done, CallStatus.approval


class Guarding:
    """What `Step` decides for its guardrails; the rest of a step is `Step`'s."""

    __slots__ = ()
    state: LoopState
    output: Output | None
    _guardrails: dict[str, tuple[Guardrail, ...]]
    _late: bool

    def _stop(self, reason: StopReason, why: str = "") -> Plan:
        raise NotImplementedError  # `Step`'s

    def _dispatch(self, asks: list[PendingCall]) -> Plan:
        raise NotImplementedError  # `Step`'s

    def _hold(self, round_: list[PendingCall]) -> Plan:
        """The round waits for its guardrails: a check of each call that would run by each
        tool-call guardrail, and any of the run's input still outstanding."""
        if self._late:
            return self._stop(StopReason.deadline, DEADLINE)
        checks = [
            PendingCheck(f"{p.call.id}/tool_call/{g.name}", g.name, "tool_call", p.call.id)
            for p in round_
            if p.status is not DONE
            for g in self._guardrails["tool_call"]
        ]
        return (CHECK, (checks, None))

    def _inputs(self, command_id: str) -> list[PendingCheck]:
        """The checks of the run's input, asked beside its first model call `command_id`."""
        return [
            PendingCheck(f"{command_id}/input/{g.name}", g.name, "input")
            for g in self._guardrails["input"]
        ]

    def _answer(self, reason: StopReason, answer: Any) -> Plan:
        """The model's final answer: the run finishes with it, once its guardrails (and any of
        the run's input still outstanding) passed."""
        finals = self._guardrails["final"]
        if not finals and not self.state.checks:
            return finish(reason, answer)
        if self._late:  # no time left to check it: it is not given unchecked
            return self._stop(StopReason.deadline, DEADLINE)
        at = f"model-{self.state.model_calls}"
        checks = [PendingCheck(f"{at}/final/{g.name}", g.name, "final") for g in finals]
        return (CHECK, (checks, (reason, answer)))

    def _checked(self) -> Plan:
        """A guardrail answered: a trip finishes the run; the last check passing lets the turn
        it held go on (its round, or its answer)."""
        st = self.state
        obs: GuardrailChecked = st.events[-1]  # type: ignore[assignment]
        if obs.tripped:
            check = next(c for c in st.checks or () if c.id == obs.check_id)
            why = f"the guardrail {check.name} tripped: {obs.message or 'no reason given'}"
            answer = {"guardrail": check.name, "on": check.on, "message": obs.message}
            return finish(StopReason.guardrail, answer, why)
        if self._late:
            return self._stop(StopReason.deadline, DEADLINE)
        if st.checks or st.phase is not CHECKING:
            return WAITING
        if st.held is not UNSET:
            return finish(st.held, st.output)
        return self._dispatch([p for p in st.round if p.status is APPROVAL])

    def _subject(self, check: PendingCheck) -> list[Message] | ToolCall | FinalAnswer:
        """What the check `check` looks at: the run's input, its call, or the held answer."""
        st = self.state
        if check.on == "tool_call":
            return next(p.call for p in st.round if p.call.id == check.call_id)
        if check.on == "input":
            return next(e for e in reversed(st.events) if type(e) is Started).messages
        reply = next(m for m in reversed(st.messages) if type(m) is AssistantMessage)
        held = st.held if st.held is not UNSET else StopReason.unknown
        return FinalAnswer(text_of(reply.content), typed(self.output, held, st.output))
