"""`Loop`: feed it observations, get commands back. Pure: no clock, no I/O, no randomness.

Each step refuses what answers nothing outstanding before it changes anything, records the
observation, asks the guards, and moves to the phase the table in `_machine` gives for what it
decided. Per observation the work is independent of history length: the ledger only grows,
requests carry an O(1) `History` view of it, and every guard keeps its own small counter.
"""

from __future__ import annotations

__all__ = ["Loop"]

import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from ._ask import cache_key, request, summary_request
from ._boundary import checked, started
from ._commands import (
    AwaitApproval,
    CallModel,
    Command,
    Finish,
    ModelRequest,
    RunTool,
    StopReason,
)
from ._compaction import DEFAULT_SUMMARY_PROMPT, compacted, plan, rewrite
from ._cost import Price
from ._errors import ProtocolError
from ._guards import FINALIZABLE, Checks, estimate_tokens, message_tokens, part_tokens
from ._history import History
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
    TABLE,
    WAIT,
    Decision,
    Phase,
)
from ._messages import (
    AssistantMessage,
    Message,
    ModelStop,
    ToolCall,
    ToolResult,
    ToolResults,
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
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from ._output import OUTPUT_TOOL, Output, answered, typed
from ._round import ASKED as _ASKED
from ._round import BUSY as _BUSY
from ._round import INTERRUPTED, REUSED, close, find, interrupt, refuse, renamed, resolve, schedule
from ._spec import LoopSpec
from ._state import (
    CallStatus,
    Compacted,
    LoopState,
    PendingCall,
    dump_state,
    load_state,
    new_run,
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


class Loop:
    """The agent loop as a state machine over `LoopState`.

    `start()` hands it the conversation, `send()` each observation; both return the commands to
    carry out next (an empty list while results are still outstanding). An observation that
    matches nothing outstanding raises `ProtocolError` and leaves the state untouched.
    """

    __slots__ = (
        *("_checks", "_finishers", "_key", "_late", "_moves", "_now", "_output", "_tools"),
        *("_offered", "spec", "state", "_window", "_view", "_view_of", "_view_n"),
    )

    def __init__(self, spec: LoopSpec, state: LoopState | None = None) -> None:
        self.spec = spec
        self.state = state if state is not None else LoopState()
        self._output = None if spec.output is None else Output(spec.output, spec.output_mode)
        self._offer(_run_tools(self.state.events) or spec.tools)
        self._key: str | None = spec.cache.key
        self._checks = Checks(spec.guards)
        self._window = spec.guards.context_window or 0
        # what requests send once the conversation was compacted: derived from the state's last
        # compaction, kept between requests and extended as the ledger grows (so a provider's
        # cache of its wire form holds), rebuilt after a new compaction or a load
        self._view: list[Message] = []
        self._view_of: Compacted | None = None
        self._view_n = 0
        # the step under way: the table's moves for its event, and whether it came past the
        # deadline (time enters a step once, with its observation)
        self._moves: dict[Decision, Phase] = {}
        self._now = 0.0
        self._late = False

    def _offer(self, tools: tuple[ToolSpec, ...]) -> None:
        """The tools the run offers the model: its own, or else the spec's."""
        out = self._output
        self._offered = tools if out is None or out.tool is None else (*tools, out.tool)
        self._tools = {t.name: t for t in self._offered}
        self._finishers = frozenset(t.name for t in self._offered if t.finish)

    # -- persistence -------------------------------------------------------------------------

    def dump(self) -> bytes:
        """The whole state as bytes; `Loop.load(spec, data)` continues from it anywhere."""
        return dump_state(self.state)

    @classmethod
    def load(cls, spec: LoopSpec, data: bytes | str) -> Loop:
        """Rebuild a loop from `dump()`; raises `CorruptState` when the bytes cannot be used."""
        return cls(spec, load_state(data))

    @classmethod
    def replay(cls, spec: LoopSpec, events: Sequence[Event]) -> Loop:
        """Rebuild a loop by feeding a recorded event log to a fresh one."""
        loop = cls(spec)
        for event in events:
            if type(event) is Started:
                loop.start(event.messages, event.now, event.tools)
            else:
                loop.send(event)  # type: ignore[arg-type]
        return loop

    # -- what executors ask ------------------------------------------------------------------

    def outstanding_commands(self) -> list[Command]:
        """The commands the state still waits on, as they were sent: what a resumed executor
        (after `load` or `replay`) must carry out again."""
        st = self.state
        if st.phase is DONE:
            return [Finish(st.stop_reason, typed(self._output, st.stop_reason, st.output))]
        commands: list[Command] = []
        if st.pending_model is not None:
            commands.append(CallModel(st.pending_model, self._request(), st.retry_at))
        for p in st.round:
            if p.status in _BUSY:
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            elif p.status is _APPROVAL:
                commands.append(AwaitApproval(p.call.id, p.call.name, p.call.arguments))
        return commands

    def outstanding_ids(self) -> frozenset[str]:
        """The ids of the commands the loop still waits on (its model call, each running call,
        each call awaiting approval): an executor may drop work whose id is not among them."""
        st = self.state
        ids = [p.call.id for p in st.round if p.status in _BUSY or p.status is _APPROVAL]
        if st.pending_model is not None:
            ids.append(st.pending_model)
        return frozenset(ids)

    def next_deadline(self) -> float | None:
        """When (on the clock that stamps observations) the deadline guard will fire, so an
        executor can send a `Tick` then; None when no deadline can fire any more."""
        st = self.state
        if st.phase is FINALIZING or st.phase is DONE:
            return None
        return self._checks.deadline(st)

    def deadline_passed(self, now: float) -> bool:
        """Whether a `Tick` stamped `now` stops the run for its deadline: a driver woken at
        `next_deadline()` sends one only then, so clocks that disagree by a rounding never make
        it tick in a loop."""
        st = self.state
        if st.phase is FINALIZING or st.phase is DONE:
            return False
        return self._checks.deadline_passed(st, now)

    def resume_offset(self, now: float) -> float:
        """What to add to a clock reading `now` so a resumed run's time goes on from its last
        event: time a dumped state spent at rest (a human away, a restart) is not counted."""
        events = self.state.events
        return events[-1].now - now if events else 0.0

    # -- driving -----------------------------------------------------------------------------

    def start(
        self, prompt: str | Sequence[Message], now: float, tools: Sequence[ToolSpec] = ()
    ) -> list[Command]:
        """Begin with a prompt (or a whole conversation ending on the user's side). On a finished
        loop, go on with the conversation: a new run over the same history, its guards counted
        afresh.

        `tools`, if any, are the run's in place of the spec's (those a tool runner or an MCP
        server offers). Its `Started` event records the run's tools, given or the spec's, so
        `replay` and `load` decide the same without whoever supplied them, and a log describes
        itself."""
        st = self.state
        moves = TABLE[st.phase].get(Started)
        if moves is None:
            raise ProtocolError(f"start() in phase {st.phase}: the run is under way")
        event = started(prompt, now, self._last_time(), st.messages, tools or self.spec.tools)
        self._offer(event.tools)
        if st.phase is DONE:
            new_run(st)
        else:
            st.context_tokens = estimate_tokens(self.spec.system or "")
        st.events.append(event)
        st.messages.extend(event.messages)
        st.started_at = event.now
        st.context_tokens += sum(message_tokens(m) for m in event.messages)
        self._step(moves, event.now)
        return self._next_turn()

    def send(self, obs: Observation) -> list[Command]:
        """Hand the loop one observation; returns the commands it decides on."""
        moves = TABLE[self.state.phase].get(type(obs))
        if moves is None:
            raise ProtocolError(f"cannot accept {obs!r} in phase {self.state.phase}")
        obs = checked(obs, self._last_time())
        self._step(moves, obs.now)
        match obs:  # most frequent first: a reply's calls each return
            case ToolReturned():
                return self._on_returned(obs)
            case ModelReplied():
                return self._on_replied(obs)
            case ToolStarted():
                return self._on_started(obs)
            case ModelFailed():
                return self._on_failed(obs)
            case Approved():
                return self._on_approved(obs)
            case Denied():
                return self._on_denied(obs)
            case Tick():
                return self._on_tick(obs)
            case Cancelled():
                return self._on_cancelled(obs)
            case Resumed():
                return self._on_resumed(obs)
        raise ProtocolError(f"{type(obs).__name__} is recorded by start(), never sent")

    def _step(self, moves: dict[Decision, Phase], now: float) -> None:
        """The step under way: the table's moves for its event, its time, and whether the run's
        own time has reached the deadline (time enters a step once, with its event)."""
        self._moves = moves
        self._now = now
        self._late = self._checks.deadline_passed(self.state, now)

    def _last_time(self) -> float | None:
        events = self.state.events
        return events[-1].now if events else None

    # -- each observation --------------------------------------------------------------------

    def _on_replied(self, obs: ModelReplied) -> list[Command]:
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
        obs = self._answered_by(obs)
        st.events.append(obs)
        # the reply's cost is counted and it joins the ledger, whatever is decided next
        st.pending_model = st.retry_at = None
        if st.retries:
            st.retries = 0
        usage = response.usage
        st.usage = st.usage + usage
        if self.spec.prices:
            price = self._price(obs.model)
            if price is not None:  # a float, so the state dumps: more than any budget
                st.cost = min(st.cost + price.of(usage), sys.float_info.max)
        if st.phase is COMPACTING:
            return self._summarized(text_of(content), obs.command_id)
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
        if self._output is None:
            return self._finish(StopReason.completed, text_of(content))
        answer, problem = self._output.check_reply(text_of(content))
        if problem is None:
            return self._finish(StopReason.completed, answer)
        return self._wrong_answer(UserMessage(problem))

    def _on_returned(self, obs: ToolReturned) -> list[Command]:
        st = self.state
        p = find(st, obs, _BUSY)
        st.events.append(obs)
        p.result = ToolResult(obs.call_id, obs.content, obs.is_error)
        p.status = _DONE
        if len(st.round) == 1 and not self._late:
            return self._complete_round()  # the reply's only call: nothing left to start
        return self._dispatch()

    def _on_started(self, obs: ToolStarted) -> list[Command]:
        p = find(self.state, obs, _SENT)
        self.state.events.append(obs)
        p.status = _STARTED
        self.state.phase = self._moves[WAIT]
        return []

    def _on_resumed(self, obs: Resumed) -> list[Command]:
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
            st.phase = self._moves[WAIT]
        return self.outstanding_commands()

    def _on_failed(self, obs: ModelFailed) -> list[Command]:
        st = self.state
        if obs.command_id != st.pending_model:
            raise self._unmatched(obs)
        st.events.append(self._answered_by(obs))
        st.pending_model = st.retry_at = None
        finalizing = st.phase is FINALIZING
        again = COMPACT if st.phase is COMPACTING else ASK
        if obs.retryable and st.retries < self._checks.max_retries:
            at = obs.now + self._checks.retry_wait(st.retries, obs.retry_after, obs.command_id)
            if not finalizing and (self._late or self._checks.deadline_passed(st, at)):
                return self._stop(StopReason.deadline)  # it would pass before the retry
            st.retries += 1
            return self._ask(again, at)
        if obs.retryable and st.model_index + 1 < len(self.spec.models):
            if not finalizing and self._late:
                return self._stop(StopReason.deadline)
            st.model_index += 1  # past its retries: the next model, at once
            st.retries = 0
            return self._ask(again)
        return self._finish(st.stop_reason if finalizing else StopReason.model_error, None)

    def _price(self, model: str | None) -> Price | None:
        """The price of a reply from `model`, else of the model asked (an executor may name it
        as the provider does, with a date)."""
        prices, models = self.spec.prices, self.spec.models
        price = prices.get(model) if model is not None else None
        if price is None and models:
            price = prices.get(models[min(self.state.model_index, len(models) - 1)])
        return price

    def _answered_by(self, obs: ModelReplied | ModelFailed) -> Any:
        """`obs` saying which model answered: the executor's word, else the one asked."""
        models = self.spec.models
        if obs.model is not None or not models:
            return obs
        return msgspec.structs.replace(
            obs, model=models[min(self.state.model_index, len(models) - 1)]
        )

    def _on_approved(self, obs: Approved) -> list[Command]:
        p = find(self.state, obs, _ASKED)
        self.state.events.append(obs)
        self._checks.human_answered(self.state, self._now)
        p.status = _QUEUED
        return self._dispatch()

    def _on_denied(self, obs: Denied) -> list[Command]:
        p = find(self.state, obs, _ASKED)
        self.state.events.append(obs)
        self._checks.human_answered(self.state, self._now)
        resolve(p, f"denied by a human: {obs.reason or 'no reason given'}. Do not retry it.")
        return self._dispatch()

    def _on_tick(self, obs: Tick) -> list[Command]:
        st = self.state
        st.events.append(obs)
        if st.phase is not FINALIZING and self._late:
            return self._stop(StopReason.deadline, _DEADLINE)
        st.phase = self._moves[WAIT]
        return []

    def _on_cancelled(self, obs: Cancelled) -> list[Command]:
        self.state.events.append(obs)
        self._checks.human_answered(self.state, self._now)
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
                p.status, p.result = _DONE, answered(self._output, call, st)
            else:
                again = self._checks.repeated(st.call_counts, call)
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
            st.phase = self._moves[RUN]
        elif open_ is _ASKED:
            st.phase = self._moves[APPROVE]
            self._checks.awaiting_human(st, self._now)
        else:
            return self._complete_round()
        return commands

    def _complete_round(self) -> list[Command]:
        """Every call has its result: write them in call order, then go on."""
        st = self.state
        results: list[ToolResult] = []
        digest = []
        tokens = 0
        failed = True
        finish: ToolCall | None = None
        for p in st.round:
            call, r = p.call, p.result
            assert r is not None
            results.append(r)
            digest.append((call.name, call.arguments, r.content, r.is_error))
            tokens += part_tokens(r.content)
            failed = failed and r.is_error and r.content != INTERRUPTED  # a crash is no failure
            if finish is None and not r.is_error and call.name in self._finishers:
                finish = call
        st.messages.append(ToolResults(results))
        st.round = []
        st.context_tokens += tokens
        if finish is not None:
            answer = finish.arguments
            if finish.name == OUTPUT_TOOL and self._output is not None:
                answer = self._output.check(answer)[0]
            return self._finish(StopReason.finish_tool, answer)
        if st.output_retries > self.spec.guards.max_output_retries:
            return self._finish(StopReason.invalid_output, None)
        self._checks.record_round(st, digest, failed)
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
        reason = self._checks.before_turn(st)
        policy = self.spec.compaction
        if policy is not None and (reason is None or reason is StopReason.context_budget):
            last = st.compactions[-1] if st.compactions else None
            budget = self._checks.budget or 0
            cut = plan(policy, st.messages, last, st.context_tokens, self._window, budget)
            if cut is not None:
                if policy.strategy == "summarize":
                    st.summarizing = cut
                    return self._ask(COMPACT)
                self._compacted(
                    compacted(policy.strategy, st.messages, last, cut, st.context_tokens)
                )
                reason = self._checks.before_turn(st)
        if reason is not None:
            return self._stop(reason)
        return self._ask(ASK)

    def _compacted(self, record: Compacted) -> None:
        st = self.state
        st.compactions.append(record)
        st.context_tokens = record.tokens_after

    def _summarized(self, summary: str, command_id: str) -> list[Command]:
        """The summary asked for came: later requests send it instead of the older turns."""
        st = self.state
        cut, st.summarizing = st.summarizing, None
        assert cut is not None
        last = st.compactions[-1] if st.compactions else None
        tokens = st.context_tokens
        self._compacted(
            compacted("summarize", st.messages, last, cut, tokens, summary or None, command_id)
        )
        return self._next_turn()

    def _stop(self, reason: StopReason, why: str = "") -> list[Command]:
        """A guard tripped: write results for calls left open, then finalize or finish."""
        st = self.state
        close(self.state, why)
        st.summarizing = None
        if reason in FINALIZABLE and self.spec.guards.finalize and st.turns > 0:
            st.stop_reason = reason
            st.messages.append(UserMessage(self.spec.guards.finalize_prompt))
            return self._ask(FINALIZE)
        return self._finish(reason, None)

    def _ask(self, decision: Decision, not_before: float | None = None) -> list[Command]:
        """Move on `decision` (ask, compact or finalize), then ask the model (a retry: not before
        `not_before`)."""
        st = self.state
        st.phase = self._moves[decision]
        st.model_calls += 1
        st.pending_model = command_id = f"model-{st.model_calls}"
        st.retry_at = not_before
        return [CallModel(command_id, self._request(), not_before)]

    def _request(self) -> ModelRequest:
        st = self.state
        spec = self.spec
        if self._key is None and spec.cache.enabled:
            self._key = cache_key(st.events)
        models = spec.models
        model = models[min(st.model_index, len(models) - 1)] if models else None
        if st.summarizing is not None:
            older = self._sent(st.summarizing)
            # a loaded state may be summarizing under a spec that no longer compacts
            policy = spec.compaction
            prompt = DEFAULT_SUMMARY_PROMPT if policy is None else policy.prompt
            return summary_request(spec, self._offered, older, prompt, self._key, model)
        messages = self._sent(None)
        return request(spec, st, self._offered, self._output, self._key, messages, model)

    def _sent(self, upto: int | None) -> Any:
        """What a request sends of the ledger (up to `upto`, else all of it): the ledger itself
        as an O(1) `History`, or, once compacted, the rewrite the last compaction makes."""
        st = self.state
        messages = st.messages
        if not st.compactions:
            return History(messages, len(messages)) if upto is None else messages[:upto]
        last = st.compactions[-1]
        if upto is not None:
            return rewrite(messages, last, upto)
        if self._view_of is not last:
            self._view, self._view_of = rewrite(messages, last, len(messages)), last
        else:
            self._view += messages[self._view_n :]
        self._view_n = len(messages)
        return History(self._view, len(self._view))

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
        st.phase = self._moves[FINISH]
        return [Finish(reason, typed(self._output, reason, output))]


def _run_tools(events: list[Event]) -> tuple[ToolSpec, ...]:
    """The tools the last run's `Started` event records (none, in a log from before every run
    recorded them: the spec's)."""
    for event in reversed(events):
        if type(event) is Started:
            return event.tools
    return ()
