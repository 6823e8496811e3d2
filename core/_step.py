"""`Step`: what one observation does to a loop's state, and the commands that follow.

`Loop` refuses what the table does not list and checks each observation at the boundary;
`Step` records it, decides what comes next, and `apply` moves to the phase the table gives for
that decision: `apply` alone writes `phase` and makes the model calls and the finish.
"""

from __future__ import annotations

__all__ = ["Step"]

from typing import Any

from ._ask import Requests
from ._commands import (
    AwaitApproval,
    CallModel,
    Command,
    Finish,
    ModelRequest,
    RunTool,
    StopReason,
)
from ._compaction import compacted, plan
from ._errors import ProtocolError
from ._guards import FINALIZABLE, Checks, part_tokens
from ._machine import (
    APPROVE,
    ASK,
    COMPACT,
    COMPACTING,
    DONE,
    FINALIZE,
    FINALIZING,
    FINISH,
    MODEL,
    RUN,
    WAIT,
    Decision,
    Phase,
)
from ._messages import (
    AssistantMessage,
    ModelStop,
    ToolCall,
    ToolResult,
    UserMessage,
    text_of,
)
from ._observations import (
    Approved,
    Cancelled,
    Denied,
    Event,
    ModelFailed,
    ModelReplied,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from ._output import OUTPUT_TOOL, Output, answered, typed
from ._record import (
    compaction_made,
    model_answered,
    round_written,
    run_started,
    summary_written,
)
from ._round import ASKED as _ASKED
from ._round import BUSY as _BUSY
from ._round import REUSED, close, find, interrupt, refuse, renamed, resolve, schedule
from ._spec import LoopSpec
from ._state import (
    CallStatus,
    LoopState,
    PendingCall,
)
from ._tools import ToolSpec, call_problem

# enum members read as module constants: on 3.11 each `Enum.member` lookup costs a descriptor
# call, and the hot path reads a dozen per turn
_DONE, _QUEUED, _RUNNING, _STARTED, _APPROVAL = (
    CallStatus.done,
    CallStatus.queued,
    CallStatus.running,
    CallStatus.started,
    CallStatus.approval,
)
_SENT = frozenset({_RUNNING})
_PENDING = frozenset({Phase.awaiting_tools, Phase.awaiting_approval})
_ENDS = {  # a reply that ends the run whatever it holds
    ModelStop.refusal: StopReason.refusal,
    ModelStop.content_filter: StopReason.refusal,
    ModelStop.requires_action: StopReason.requires_action,
}
_DEADLINE = "the run's deadline passed"
_ASKS = frozenset({ASK, COMPACT, FINALIZE})  # the decisions that ask the model


class Step:
    """The loop's working part over one `LoopState`: the caches its requests keep and the step
    under way."""

    __slots__ = (
        *("checks", "_finishers", "_late", "_moves", "_now", "output", "_tools"),
        *("offered", "requests", "spec", "state", "_window"),
    )

    def __init__(self, spec: LoopSpec, state: LoopState) -> None:
        self.spec = spec
        self.state = state
        self.output = None if spec.output is None else Output(spec.output, spec.output_mode)
        self.offer(_run_tools(state.events) or spec.tools)
        self.requests = Requests(spec)
        self.checks = Checks(spec.guards)
        self._window = spec.guards.context_window or 0
        # the step under way: the table's moves for its event, and whether it came past the
        # deadline (time enters a step once, with its observation)
        self._moves: dict[Decision, Phase] = {}
        self._now = 0.0
        self._late = False

    def offer(self, tools: tuple[ToolSpec, ...]) -> None:
        """The tools the run offers the model: its own, or else the spec's."""
        out = self.output
        self.offered = tools if out is None or out.tool is None else (*tools, out.tool)
        self._tools = {t.name: t for t in self.offered}
        self._finishers = frozenset(t.name for t in self.offered if t.finish)

    def outstanding(self) -> list[Command]:
        """The commands the state still waits on, as they were sent."""
        st = self.state
        if st.phase is DONE:
            return [Finish(st.stop_reason, typed(self.output, st.stop_reason, st.output))]
        commands: list[Command] = []
        if st.pending_model is not None:
            commands.append(CallModel(st.pending_model, self.request(), st.retry_at))
        for p in st.round:
            if p.status in _BUSY:
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            elif p.status is _APPROVAL:
                commands.append(AwaitApproval(p.call.id, p.call.name, p.call.arguments))
        return commands

    def begin(self, moves: dict[Decision, Phase], event: Started) -> list[Command]:
        """A run starts on `event` (checked): the conversation joins the ledger, then the first
        turn."""
        st = self.state
        self.offer(event.tools)
        run_started(st, self.spec, event)
        self.at(moves, event.now)
        return self._next_turn()

    def apply(
        self, decision: Decision, commands: list[Command], not_before: float | None = None
    ) -> list[Command]:
        """Move on `decision` as the table gives it for the step's event, the only place that
        writes `phase`; to ask the model, or finish, make that command, else hand on `commands`
        (tools to run, approvals to ask for)."""
        st = self.state
        st.phase = self._moves[decision]
        if decision in _ASKS:
            st.model_calls += 1
            st.pending_model = command_id = f"model-{st.model_calls}"
            st.retry_at = not_before
            request = self.requests.next(st, self.offered, self.output)
            return [CallModel(command_id, request, not_before)]
        if decision is FINISH:
            reason = st.stop_reason
            return [Finish(reason, typed(self.output, reason, st.output))]
        return commands

    def at(self, moves: dict[Decision, Phase], now: float) -> None:
        """The step under way: the table's moves for its event, its time, and whether the run's
        own time has reached the deadline (time enters a step once, with its event)."""
        self._moves = moves
        self._now = now
        self._late = self.checks.deadline_passed(self.state, now)

    # -- each observation --------------------------------------------------------------------

    def on_replied(self, obs: ModelReplied) -> list[Command]:
        st = self.state
        if obs.command_id != st.pending_model:
            raise self._unmatched(obs)
        response = obs.response
        content = response.content
        calls: list[ToolCall] = []
        for part in content:  # a plain loop: a comprehension costs a frame on 3.11
            if type(part) is ToolCall:
                calls.append(part)
        reused: dict[str, str] = {}
        if len(calls) > 1 and len({c.id for c in calls}) < len(calls):
            content, calls, reused = renamed(content)
        usage = response.usage
        model_answered(st, self.spec, obs, usage)
        if st.phase is COMPACTING:
            summary_written(st, text_of(content), obs.command_id)
            return self._next_turn()
        st.messages.append(AssistantMessage(content))
        if usage.input_tokens:
            st.context_tokens = usage.input_tokens + usage.output_tokens
        else:
            st.context_tokens += part_tokens(content)
        if st.phase is FINALIZING:
            refuse(self.state, calls, "the run is finishing")
            return self._finish(st.stop_reason, text_of(response.content))
        st.turns += 1
        stop = response.stop
        if stop in _ENDS:
            refuse(self.state, calls, f"the reply ended with {stop.value}")
            return self._finish(_ENDS[stop], text_of(response.content))
        if calls:
            return self._start_round(calls, reused)
        if stop is ModelStop.pause:
            return self._next_turn()
        if stop is ModelStop.max_tokens:
            return self._finish(StopReason.max_tokens, text_of(content))
        if self.output is None:
            return self._finish(StopReason.completed, text_of(content))
        answer, problem = self.output.check_reply(text_of(content))
        if problem is None:
            return self._finish(StopReason.completed, answer)
        return self._wrong_answer(UserMessage(problem))

    def on_returned(self, obs: ToolReturned) -> list[Command]:
        st = self.state
        p = find(st, obs, _BUSY)
        st.events.append(obs)
        p.result = ToolResult(obs.call_id, obs.content, obs.is_error)
        p.status = _DONE
        if len(st.round) == 1 and not self._late:
            return self._complete_round()  # the reply's only call: nothing left to start
        return self._dispatch()

    def on_started(self, obs: ToolStarted) -> list[Command]:
        p = find(self.state, obs, _SENT)
        self.state.events.append(obs)
        p.status = _STARTED
        return self.apply(WAIT, [])

    def on_resumed(self, obs: Resumed) -> list[Command]:
        """Another process goes on: settle the calls a crash interrupted, hand out the rest."""
        st = self.state
        st.events.append(obs)
        if st.round:
            interrupt(st, self._tools)
            commands = self._dispatch()  # the deadline, too, as for a result
            if st.phase not in _PENDING:
                return commands  # the round is over: what comes next
        elif self._late and st.phase in (MODEL, COMPACTING):
            return self._stop(StopReason.deadline, _DEADLINE)
        else:
            self.apply(WAIT, [])
        return self.outstanding()

    def on_failed(self, obs: ModelFailed) -> list[Command]:
        st = self.state
        if obs.command_id != st.pending_model:
            raise self._unmatched(obs)
        model_answered(st, self.spec, obs)
        finalizing = st.phase is FINALIZING
        again = COMPACT if st.phase is COMPACTING else ASK
        if obs.retryable and st.retries < self.checks.max_retries:
            at = obs.now + self.checks.retry_wait(st.retries, obs.retry_after, obs.command_id)
            if not finalizing and (self._late or self.checks.deadline_passed(st, at)):
                return self._stop(StopReason.deadline)  # it would pass before the retry
            st.retries += 1
            return self.apply(again, [], at)
        if obs.retryable and st.model_index + 1 < len(self.spec.models):
            if not finalizing and self._late:
                return self._stop(StopReason.deadline)
            st.model_index += 1  # past its retries: the next model, at once
            st.retries = 0
            return self.apply(again, [])
        return self._finish(st.stop_reason if finalizing else StopReason.model_error, None)

    def on_approved(self, obs: Approved) -> list[Command]:
        p = find(self.state, obs, _ASKED)
        self.state.events.append(obs)
        self.checks.human_answered(self.state, self._now)
        p.status = _QUEUED
        return self._dispatch()

    def on_denied(self, obs: Denied) -> list[Command]:
        p = find(self.state, obs, _ASKED)
        self.state.events.append(obs)
        self.checks.human_answered(self.state, self._now)
        resolve(p, f"denied by a human: {obs.reason or 'no reason given'}. Do not retry it.")
        return self._dispatch()

    def on_tick(self, obs: Tick) -> list[Command]:
        st = self.state
        st.events.append(obs)
        if st.phase is not FINALIZING and self._late:
            return self._stop(StopReason.deadline, _DEADLINE)
        return self.apply(WAIT, [])

    def on_cancelled(self, obs: Cancelled) -> list[Command]:
        self.state.events.append(obs)
        self.checks.human_answered(self.state, self._now)
        close(self.state, f"the run was cancelled ({obs.reason or 'no reason given'})")
        return self._finish(StopReason.cancelled, None)

    def _unmatched(self, obs: ModelReplied | ModelFailed) -> ProtocolError:
        return ProtocolError(
            f"{type(obs).__name__}(command_id={obs.command_id!r}) matches no outstanding "
            f"model call (outstanding: {self.state.pending_model!r})"
        )

    # -- a reply and its round ---------------------------------------------------------------

    def _start_round(self, calls: list[ToolCall], reused: dict[str, str]) -> list[Command]:
        """Take the reply's calls as the new round: give the ones that cannot run an error result,
        count repeats, ask for approvals, and start what may run. `reused`: calls renamed because
        the reply gave an earlier call their id (new id -> the id they came with)."""
        st = self.state
        tools = self._tools
        repeated = None
        round_: list[PendingCall] = []
        asks: list[Command] = []
        for call in calls:
            spec = tools.get(call.name)
            p = PendingCall(call, _QUEUED)
            round_.append(p)
            if call.id in reused:
                resolve(p, REUSED.format(reused[call.id]))
            elif spec is None or not call.complete or call.raw_arguments is not None:
                resolve(p, call_problem(call, tools))
            elif spec.finish:
                p.status, p.result = _DONE, answered(self.output, call, st)
            else:
                again = self.checks.repeated(st.call_counts, call)
                if again is not None and repeated is None:
                    repeated = again
                elif spec.needs_approval:
                    p.status = _APPROVAL
                    asks.append(AwaitApproval(call.id, call.name, call.arguments))
        st.round = round_
        if repeated is not None:
            close(self.state, repeated)
            return self._finish(StopReason.repeated_call, None)
        if not asks:
            return self._dispatch()
        if self._late:
            return self._stop(StopReason.deadline, _DEADLINE)  # before asking for approval
        return asks + self._dispatch()

    def _dispatch(self) -> list[Command]:
        """Start what may run now (`schedule`); then wait for it, or for a human, or go on."""
        st = self.state
        if self._late:
            return self._stop(StopReason.deadline, _DEADLINE)
        commands, open_ = schedule(st.round, self._tools)
        if open_ is _BUSY:
            return self.apply(RUN, commands)
        if open_ is _ASKED:
            self.checks.awaiting_human(st, self._now)
            return self.apply(APPROVE, commands)
        return self._complete_round()

    def _complete_round(self) -> list[Command]:
        """Every call has its result: write them in call order, then go on."""
        st = self.state
        digest, failed, finish = round_written(st, self._finishers)
        if finish is not None:
            answer = finish.arguments
            if finish.name == OUTPUT_TOOL and self.output is not None:
                answer = self.output.check(answer)[0]
            return self._finish(StopReason.finish_tool, answer)
        if st.output_retries > self.spec.guards.max_output_retries:
            return self._finish(StopReason.invalid_output, None)
        self.checks.record_round(st, digest, failed)
        return self._next_turn()

    # -- deciding what comes next ------------------------------------------------------------

    def _next_turn(self) -> list[Command]:
        """Between turns: the stop conditions, then the guards, else ask the model."""
        st = self.state
        for condition in self.spec.stop_when:
            if condition(st):
                return self._finish(StopReason.stop_condition, None)
        if self._late:
            return self._stop(StopReason.deadline)
        reason = self.checks.before_turn(st)
        policy = self.spec.compaction
        if policy is not None and (reason is None or reason is StopReason.context_budget):
            last = st.compactions[-1] if st.compactions else None
            budget = self.checks.budget or 0
            cut = plan(policy, st.messages, last, st.context_tokens, self._window, budget)
            if cut is not None:
                if policy.strategy == "summarize":
                    st.summarizing = cut
                    return self.apply(COMPACT, [])
                compaction_made(
                    st, compacted(policy.strategy, st.messages, last, cut, st.context_tokens)
                )
                reason = self.checks.before_turn(st)
        if reason is not None:
            return self._stop(reason)
        return self.apply(ASK, [])

    def _stop(self, reason: StopReason, why: str = "") -> list[Command]:
        """A guard tripped: write results for calls left open, then finalize or finish."""
        st = self.state
        close(self.state, why)
        st.summarizing = None
        if reason in FINALIZABLE and self.spec.guards.finalize and st.turns > 0:
            st.stop_reason = reason
            st.messages.append(UserMessage(self.spec.guards.finalize_prompt))
            return self.apply(FINALIZE, [])
        return self._finish(reason, None)

    def request(self) -> ModelRequest:
        """The next model call's request."""
        return self.requests.next(self.state, self.offered, self.output)

    def _wrong_answer(self, problem: UserMessage) -> list[Command]:
        """A reply that ended without a valid answer: tell the model, or give up past the
        retries allowed."""
        st = self.state
        st.output_retries += 1
        if st.output_retries > self.spec.guards.max_output_retries:
            return self._finish(StopReason.invalid_output, None)
        st.messages.append(problem)
        return self._next_turn()

    def _finish(self, reason: StopReason, output: Any) -> list[Command]:
        st = self.state
        st.stop_reason = reason
        st.output = output
        st.pending_model = st.retry_at = None
        st.summarizing = None
        return self.apply(FINISH, [])


def _run_tools(events: list[Event]) -> tuple[ToolSpec, ...]:
    """The tools the last run's `Started` event records (none, in a log from before every run
    recorded them: the spec's)."""
    for event in reversed(events):
        if type(event) is Started:
            return event.tools
    return ()
