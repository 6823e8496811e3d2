"""`Step`: what follows once an observation is recorded: the decision, and the one `apply`.

Deciding reads the state and writes nothing: `decide` and the methods it goes through return a
plan, the `Decision` the table lists for the step's event with what acting on it takes (the
calls to start, why a run stops). Where a decision depends on a write (a reply's calls opened as
a round, a round written once every call has its result, a compaction, a refused answer), the
plan names the `_record` writer first and the deciding method to go on with after it. `apply`
moves to the phase the table gives for the decision, writes what the decision does to the
state, and makes its commands: it alone writes `phase`, and it makes every command the loop
sends.
"""

from __future__ import annotations

__all__ = ["Step"]

from typing import Any

import msgspec

from ._ask import Requests
from ._checking import Guarding
from ._commands import (
    AwaitApproval,
    CallModel,
    CheckGuardrail,
    Command,
    Finish,
    ModelRequest,
    RunTool,
    StopReason,
)
from ._compaction import compacted, plan
from ._guards import FINALIZABLE, Checks
from ._machine import (
    APPROVE,
    ASK,
    CHECK,
    CHECKING,
    COMPACT,
    COMPACTING,
    DONE,
    FINALIZE,
    FINALIZING,
    FINISH,
    MODEL,
    RUN,
    Decision,
    Phase,
)
from ._messages import AssistantMessage, ModelStop, ToolCall, UserMessage, text_of
from ._observations import (
    Approved,
    Cancelled,
    Denied,
    Event,
    GuardrailChecked,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from ._output import OUTPUT_TOOL, Output, typed
from ._plan import ASKING as _ASKING
from ._plan import DEADLINE as _DEADLINE
from ._plan import WAITING as _WAITING
from ._plan import WRITTEN as _WRITTEN
from ._plan import Plan
from ._plan import finish as _finish
from ._plan import planned as _planned
from ._record import (
    answer_refused,
    close,
    compaction_made,
    round_counted,
    round_opened,
    round_written,
    run_started,
)
from ._round import ASKED, BUSY, opened, schedule
from ._spec import LoopSpec
from ._state import CallStatus, LoopState, PendingCall
from ._tools import ToolSpec

# enum members read as module constants: on 3.11 each `Enum.member` lookup costs a descriptor
# call, and the hot path reads a dozen per turn
_DONE, _QUEUED, _RUNNING, _APPROVAL = (
    CallStatus.done,
    CallStatus.queued,
    CallStatus.running,
    CallStatus.approval,
)
_ENDS = {  # a reply that ends the run whatever it holds
    ModelStop.refusal: StopReason.refusal,
    ModelStop.content_filter: StopReason.refusal,
    ModelStop.requires_action: StopReason.requires_action,
}
_FINISHING = "the run is finishing"
_ASKS = frozenset({ASK, COMPACT, FINALIZE})  # the decisions that ask the model
_NONE: list[Any] = []  # no calls (never written to)
_UNSET = msgspec.UNSET
_NO_GUARDRAILS: dict[str, tuple[Any, ...]] = {"input": (), "tool_call": (), "final": ()}


class Step(Guarding):
    """The loop's working part over one `LoopState`: the caches its requests keep and the step
    under way."""

    __slots__ = (
        *("checks", "_finishers", "_late", "_moves", "_now", "output", "tools"),
        *("offered", "requests", "spec", "state", "_window", "_guardrails", "_opening"),
    )

    def __init__(self, spec: LoopSpec, state: LoopState) -> None:
        self.spec = spec
        self.state = state
        self.output = None if spec.output is None else Output(spec.output, spec.output_mode)
        self.offer(_run_tools(state.events) or spec.tools)
        self.requests = Requests(spec)
        self.checks = Checks(spec.guards)
        self._window = spec.guards.context_window or 0
        # the spec's guardrails by what they check; a run's input checks go with its first call
        self._guardrails = (
            _NO_GUARDRAILS
            if not spec.guardrails
            else {on: tuple(g for g in spec.guardrails if g.on == on) for on in _NO_GUARDRAILS}
        )
        self._opening = False
        # the step under way: the table's moves for its event, its time, and whether it came
        # past the deadline (time enters a step once, with its event)
        self._moves: dict[Decision, Phase] = {}
        self._now = 0.0
        self._late = False

    def offer(self, tools: tuple[ToolSpec, ...]) -> None:
        """The tools the run offers the model: its own, or else the spec's."""
        out = self.output
        self.offered = tools if out is None or out.tool is None else (*tools, out.tool)
        self.tools = {t.name: t for t in self.offered}
        self._finishers = frozenset(t.name for t in self.offered if t.finish)

    def outstanding(self) -> list[Command]:
        """The commands the state still waits on, as `apply` sent them."""
        st = self.state
        if st.phase is DONE:
            return [Finish(st.stop_reason, typed(self.output, st.stop_reason, st.output))]
        commands: list[Command] = []
        if st.pending_model is not None:
            commands.append(CallModel(st.pending_model, self.request(), st.retry_at))
        for c in st.checks or ():
            commands.append(CheckGuardrail(c.id, c.name, c.on, self._subject(c)))
        for p in st.round:
            if p.status in BUSY:
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            elif p.status is _APPROVAL and st.phase is not CHECKING:  # (held: not asked yet)
                commands.append(AwaitApproval(p.call.id, p.call.name, p.call.arguments))
        return commands

    def request(self) -> ModelRequest:
        """The next model call's request."""
        return self.requests.next(self.state, self.offered, self.output)

    # -- a step ------------------------------------------------------------------------------

    def begin(self, moves: dict[Decision, Phase], event: Started) -> list[Command]:
        """A run starts on `event` (checked): the conversation joins the ledger, then the first
        turn."""
        self.offer(event.tools)
        run_started(self.state, self.spec, event)
        self.at(moves, event.now)
        self._opening = bool(self._guardrails["input"])
        try:
            return self.act(self._next_turn())
        finally:
            self._opening = False

    def at(self, moves: dict[Decision, Phase], now: float) -> None:
        """The step under way: the table's moves for its event, its time, and whether the run's
        own time has reached the deadline."""
        self._moves = moves
        self._now = now
        self._late = self.checks.deadline_passed(self.state, now)

    def after(
        self, moves: dict[Decision, Phase], obs: Observation, reused: dict[str, str]
    ) -> list[Command]:
        """Decide on `obs`, just recorded, and act: `reused`, a reply's calls renamed because it
        gave an earlier call their id."""
        self._moves = moves  # (`at`, inline: this runs twice a turn)
        self._now = now = obs.now
        checks = self.checks
        self._late = checks.deadline_s is not None and checks.deadline_passed(self.state, now)
        kind = type(obs)
        plan = self.decide(kind, reused)
        while len(plan) == 4:  # (`act`, inline: this runs twice a turn)
            write, args, then, given = plan
            written = write(*args)
            plan = then(written if given is _WRITTEN else given)
        commands = self.apply(plan[0], plan[1])
        if kind is Resumed:  # another process goes on: everything still waited on, again
            return self.outstanding()
        return commands

    def act(self, plan: Plan) -> list[Command]:
        """Carry out `plan`: make each write it waits on (a `_record` writer) and decide on,
        until a decision, which `apply` acts on."""
        while len(plan) == 4:
            write, args, then, given = plan
            written = write(*args)
            plan = then(written if given is _WRITTEN else given)
        return self.apply(plan[0], plan[1])

    # -- deciding: each reads the state, writes nothing, and returns a plan ------------------

    def decide(self, kind: type[Observation], reused: dict[str, str]) -> Plan:
        """What to make of the observation of type `kind` just recorded."""
        st = self.state
        if kind is ToolReturned:
            if len(st.round) == 1 and not self._late:  # the reply's only call: on to the next
                return (round_written, (self.state, self._finishers), self._written, _WRITTEN)
            return self._dispatch(_NONE)
        if kind is ModelReplied:
            return self._replied(reused)
        if kind is ToolStarted:
            return _WAITING
        if kind is ModelFailed:
            return self._failed()
        if kind is Approved or kind is Denied:
            return self._dispatch(_NONE)
        if kind is Tick:
            if st.phase is not FINALIZING and self._late:
                return self._stop(StopReason.deadline, _DEADLINE)
            return _WAITING
        if kind is Resumed:
            return self._resumed()
        if kind is GuardrailChecked:
            return self._checked()
        cancel: Cancelled = st.events[-1]  # type: ignore[assignment]
        why = f"the run was cancelled ({cancel.reason or 'no reason given'})"
        return _finish(StopReason.cancelled, None, why)

    def _replied(self, reused: dict[str, str]) -> Plan:
        """A reply: to the turn after a summary, the round of its calls, the answer, or the
        end."""
        st = self.state
        phase = st.phase
        if phase is COMPACTING:
            return self._next_turn()
        reply: AssistantMessage = st.messages[-1]  # type: ignore[assignment]
        content = reply.content  # the reply, as the ledger holds it
        calls: list[ToolCall] = []
        for part in content:  # a plain loop: a comprehension costs a frame on 3.11
            if type(part) is ToolCall:
                calls.append(part)
        if phase is FINALIZING:
            return _finish(st.stop_reason, text_of(content), _FINISHING, calls)
        stop = st.events[-1].response.stop  # type: ignore[union-attr]
        if stop in _ENDS:
            why = f"the reply ended with {stop.value}"
            return _finish(_ENDS[stop], text_of(content), why, calls)
        if calls:
            return self._start_round(calls, reused)
        if stop is ModelStop.pause:
            return self._next_turn()
        if stop is ModelStop.max_tokens:
            return _finish(StopReason.max_tokens, text_of(content))
        if self.output is None:
            return self._answer(StopReason.completed, text_of(content))
        answer, problem = self.output.check_reply(text_of(content))  # type: ignore[arg-type]
        if problem is None:
            return self._answer(StopReason.completed, answer)
        if st.output_retries + 1 > self.spec.guards.max_output_retries:
            return (answer_refused, (st, None), _planned, _finish(StopReason.invalid_output, None))
        return (answer_refused, (st, UserMessage(problem)), self._next_turn, None)

    def _start_round(self, calls: list[ToolCall], reused: dict[str, str]) -> Plan:
        """Take the reply's calls as the new round (`opened`: results for the ones that cannot
        run, repeats counted), then hold it for its guardrails, or ask for approvals and start
        what may run."""
        st = self.state
        round_, counted, repeated, wrong, asks = opened(
            calls, self.tools, reused, self.output, self.checks, st.call_counts
        )
        write = (st, round_, counted, wrong)
        if repeated is not None:  # (what follows is known before the round is written)
            then: Plan = _finish(StopReason.repeated_call, None, repeated)
        elif asks and self._late:
            then = self._stop(StopReason.deadline, _DEADLINE)  # before asking for approval
        elif (st.checks or self._guardrails["tool_call"]) and any(
            p.status is not _DONE for p in round_
        ):
            return (round_opened, write, self._hold, round_)
        else:
            return (round_opened, write, self._dispatch, asks)
        return (round_opened, write, _planned, then)

    def _dispatch(self, asks: list[PendingCall]) -> Plan:
        """Start what may run now (`schedule`); then wait for it, or for a human, or go on."""
        if self._late:
            return self._stop(StopReason.deadline, _DEADLINE)
        if self.state.phase is CHECKING and self.state.checks:  # held for its guardrails
            return _WAITING
        round_ = self.state.round
        if len(round_) == 1 and round_[0].status is _QUEUED:  # (`schedule`: a lone call starts)
            return (RUN, (round_, asks))
        starts, open_ = schedule(round_, self.tools)
        if open_ is BUSY:
            return (RUN, (starts, asks))
        if open_ is ASKED:
            return (APPROVE, (asks,))
        return self._round_complete()

    def _round_complete(self) -> Plan:
        """Every call has its result: the round is written in call order, then on."""
        return (round_written, (self.state, self._finishers), self._written, _WRITTEN)

    def _written(self, written: tuple[Any, bool, ToolCall | None]) -> Plan:
        """The round is written: a finishing tool's answer, too many wrong answers, or the
        round counts for the guards and the next turn comes."""
        digest, failed, finish = written
        if finish is not None:
            answer = finish.arguments
            if finish.name == OUTPUT_TOOL and self.output is not None:
                answer = self.output.check(answer)[0]
            return self._answer(StopReason.finish_tool, answer)
        if self.state.output_retries > self.spec.guards.max_output_retries:
            return _finish(StopReason.invalid_output, None)
        return (round_counted, (self.state, self.checks, digest, failed), self._next_turn, None)

    def _failed(self) -> Plan:
        """A failed model call: retry it, ask the next model, or stop."""
        st = self.state
        failure: ModelFailed = st.events[-1]  # type: ignore[assignment]
        finalizing = st.phase is FINALIZING
        again = COMPACT if st.phase is COMPACTING else ASK
        checks = self.checks
        if failure.retryable and st.retries < checks.max_retries:
            wait = checks.retry_wait(st.retries, failure.retry_after, failure.command_id)
            at = failure.now + wait
            if not finalizing and (self._late or checks.deadline_passed(st, at)):
                return self._stop(StopReason.deadline)  # it would pass before the retry
            return (again, (at, False, None))
        if failure.retryable and st.model_index + 1 < len(self.spec.models):
            if not finalizing and self._late:
                return self._stop(StopReason.deadline)
            return (again, (None, True, None))  # past its retries: the next model, at once
        return _finish(st.stop_reason if finalizing else StopReason.model_error, None)

    def _resumed(self) -> Plan:
        """Another process goes on (the calls a crash interrupted are settled): on with the
        round, or stop past the deadline, or wait for what is outstanding."""
        st = self.state
        if st.round:
            return self._dispatch(_NONE)  # the deadline, too, as for a result
        if self._late and st.phase in (MODEL, COMPACTING, CHECKING):
            return self._stop(StopReason.deadline, _DEADLINE)
        return _WAITING

    def _next_turn(self, _: object = None) -> Plan:
        """Between turns (after whatever a write returned): the stop conditions, then the
        guards, else ask the model."""
        st = self.state
        for condition in self.spec.stop_when:
            if condition(st):
                return _finish(StopReason.stop_condition, None)
        if self._late:
            return self._stop(StopReason.deadline)
        checks = self.checks
        reason = checks.before_turn(st)
        policy = self.spec.compaction
        if policy is not None and (reason is None or reason is StopReason.context_budget):
            last = st.compactions[-1] if st.compactions else None
            budget = checks.budget or 0
            cut = plan(policy, st.messages, last, st.context_tokens, self._window, budget)
            if cut is not None:
                if policy.strategy == "summarize":
                    return (COMPACT, (None, False, cut))
                made = compacted(policy.strategy, st.messages, last, cut, st.context_tokens)
                return (compaction_made, (st, made), self._compacted, None)
        if reason is not None:
            return self._stop(reason)
        return _ASKING

    def _compacted(self, _: object) -> Plan:
        """The conversation is compacted in place: ask, unless a guard still trips."""
        reason = self.checks.before_turn(self.state)
        return _ASKING if reason is None else self._stop(reason)

    def _stop(self, reason: StopReason, why: str = "") -> Plan:
        """A guard tripped: finalize (one last call, without tools) or finish; calls left open
        get results saying `why`."""
        guards = self.spec.guards
        st = self.state  # (with guardrails outstanding, no answer comes before they passed)
        if reason in FINALIZABLE and guards.finalize and st.turns > 0 and not st.checks:
            return (FINALIZE, (reason, why, guards.finalize_prompt))
        return _finish(reason, None, why)

    # -- acting ------------------------------------------------------------------------------

    def apply(self, decision: Decision, args: tuple[Any, ...] = ()) -> list[Command]:
        """Act on `decision`: move to the phase the table gives it for the step's event (the
        only place that writes `phase`), write what it does to the state, and make its
        commands, the only place that makes any. `args`, by decision: `run` the calls to start
        and those to ask for; `approve` those to ask for; `ask` and `compact` a retry's time, to
        the next of the spec's models or not, and (`compact`) the turns to summarize;
        `finalize` the stop reason, why, and the note the model reads; `finish` the stop
        reason, the output, why, and the refused calls of a reply. Stopping, a round still
        open (or the refused calls) gets results saying why."""
        st = self.state
        st.phase = self._moves[decision]
        if decision is RUN:
            starts, asks = args
            commands: list[Command] = []
            for p in asks:
                commands.append(AwaitApproval(p.call.id, p.call.name, p.call.arguments))
            for p in starts:
                p.status = _RUNNING
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            return commands
        if decision is CHECK:
            checks, held = args
            if held is not None:
                st.held, st.output = held
            if checks:
                st.checks = [*(st.checks or ()), *checks]
            return [CheckGuardrail(c.id, c.name, c.on, self._subject(c)) for c in checks]
        if decision in _ASKS:
            not_before = None
            if decision is FINALIZE:
                reason, why, note = args
                close(st, why)
                st.summarizing = None
                st.stop_reason = reason
                st.messages.append(UserMessage(note))
            elif args:  # (none: the next turn, asked at once)
                not_before, next_model, summarize = args
                if summarize is not None:
                    st.summarizing = summarize
                if not_before is not None:
                    st.retries += 1
                elif next_model:
                    st.model_index += 1
                    st.retries = 0
            st.model_calls += 1
            st.pending_model = command_id = f"model-{st.model_calls}"
            st.retry_at = not_before
            request = self.requests.next(st, self.offered, self.output)
            if self._opening:  # a run's first call: its input is checked meanwhile
                self._opening = False
                st.checks = inputs = self._inputs(command_id)
                asked = [CheckGuardrail(c.id, c.name, c.on, self._subject(c)) for c in inputs]
                return [CallModel(command_id, request, not_before), *asked]
            return [CallModel(command_id, request, not_before)]
        if decision is FINISH:
            reason, output, why, refused = args
            close(st, why, refused)
            st.stop_reason = reason
            st.output = output
            st.pending_model = st.retry_at = None
            st.summarizing = None
            st.checks = st.held = _UNSET  # checks still out are no longer waited for
            return [Finish(reason, typed(self.output, reason, output))]
        if decision is APPROVE:
            if st.waiting_since is None:  # from now only a human moves it on: not the run's time
                st.waiting_since = self._now
            return [AwaitApproval(p.call.id, p.call.name, p.call.arguments) for p in args[0]]
        return []  # WAIT


def _run_tools(events: list[Event]) -> tuple[ToolSpec, ...]:
    """The tools the last run's `Started` event records (none, in a log from before every run
    recorded them: the spec's)."""
    for event in reversed(events):
        if type(event) is Started:
            return event.tools
    return ()
