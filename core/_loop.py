"""`Loop`: feed it observations, get commands back. Pure: no clock, no I/O, no randomness.

Per observation the work is independent of history length: the ledger only grows, requests carry
an O(1) `History` view of it, and every guard keeps its own small counter.
"""

from __future__ import annotations

__all__ = ["Loop"]

import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ._commands import (
    AwaitApproval,
    CallModel,
    Command,
    Finish,
    ModelRequest,
    Purpose,
    RunTool,
    StopReason,
)
from ._errors import CorruptState, HistoryProblem, InvalidHistory, ProtocolError
from ._history import History, history_problems
from ._machine import ACCEPTS, NEXT
from ._messages import (
    AssistantMessage,
    Message,
    ModelStop,
    Part,
    Text,
    Thinking,
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
    Started,
    Tick,
    ToolReturned,
)
from ._spec import LoopSpec
from ._state import CallStatus, LoopState, PendingCall, dump_state, load_state
from ._tools import ToolSpec

_BUDGET_REASONS = (StopReason.max_turns, StopReason.deadline, StopReason.context_budget)
# keys sorted: equal arguments encode equal whatever their order ("deterministic" sorts dict keys
# like "sorted" does, and costs less)
_canonical = msgspec.json.Encoder(order="deterministic")
_crc32 = zlib.crc32
_UNLISTED = ToolSpec(name="")
# enum members read as module constants: on 3.11 each `Enum.member` lookup costs a descriptor
# call, and the hot path reads a dozen per turn
_DONE, _QUEUED, _RUNNING, _APPROVAL = (
    CallStatus.done,
    CallStatus.queued,
    CallStatus.running,
    CallStatus.approval,
)
_REFUSALS = frozenset({ModelStop.refusal, ModelStop.content_filter})
_DEADLINE = "the run's deadline passed"
_NO_RESOURCES: frozenset[str] = frozenset()
_PAST_DEADLINES = frozenset({"finalizing", "done"})  # the deadline no longer applies


def estimate_tokens(text: str) -> int:
    """A deliberately generous token estimate (about 3 UTF-8 bytes a token) for budgeting."""
    size = len(text) if text.isascii() else len(text.encode())  # isascii is O(1): no copy
    return (size + 2) // 3


def _part_tokens(parts: Iterable[Part]) -> int:
    total = 0
    for p in parts:
        if type(p) is Text or type(p) is Thinking:
            total += estimate_tokens(p.text)
        elif type(p) is ToolCall:
            total += estimate_tokens(p.raw_arguments or _canonical.encode(p.arguments).decode())
    return total


def _message_tokens(message: Message) -> int:
    match message:
        case UserMessage(content=content):
            return estimate_tokens(content)
        case AssistantMessage(content=parts):
            return _part_tokens(parts)
        case ToolResults(results=results):
            return sum(estimate_tokens(r.content) for r in results)
    raise TypeError(f"not a message: {message!r}")


class Loop:
    """The agent loop as a state machine over `LoopState`.

    `start()` hands it the conversation, `send()` each observation; both return the commands to
    carry out next (an empty list while results are still outstanding). An observation that
    matches nothing outstanding raises `ProtocolError` and leaves the state untouched.
    """

    __slots__ = (
        "_budget",
        "_deadline",
        "_finishers",
        "_max_failed",
        "_max_turns",
        "_repeat_limit",
        "_stall",
        "_tools",
        "spec",
        "state",
    )

    def __init__(self, spec: LoopSpec, state: LoopState | None = None) -> None:
        self.spec = spec
        self.state = state if state is not None else LoopState()
        self._tools = {t.name: t for t in spec.tools}
        self._finishers = frozenset(t.name for t in spec.tools if t.finish)
        # the guards as plain values, read on every turn (the spec is frozen)
        g = spec.guards
        self._deadline = g.deadline_s
        self._max_turns = g.max_turns
        self._budget = None if g.context_window is None else g.context_window - g.reserve_tokens
        self._max_failed = g.max_failed_rounds
        self._repeat_limit = g.max_repeated_calls
        self._stall = g.max_stalled_rounds

    # -- persistence -------------------------------------------------------------------------

    def dump(self) -> bytes:
        """The whole state as bytes; `Loop.load(spec, data)` continues from it anywhere."""
        return dump_state(self.state)

    @classmethod
    def load(cls, spec: LoopSpec, data: bytes | str) -> Loop:
        """Rebuild a loop from `dump()`; raises `CorruptState` when the bytes cannot be used."""
        state = load_state(data)
        if state.phase not in ACCEPTS:
            raise CorruptState(f"unknown phase {state.phase!r}")
        pending = state.phase in ("awaiting_tools", "awaiting_approval")
        problems = history_problems(state.messages, allow_pending=pending)
        if problems:
            raise CorruptState(f"state holds an invalid history: {InvalidHistory(problems)}")
        return cls(spec, state)

    @classmethod
    def replay(cls, spec: LoopSpec, events: Sequence[Event]) -> Loop:
        """Rebuild a loop by feeding a recorded event log to a fresh one."""
        loop = cls(spec)
        for event in events:
            if type(event) is Started:
                loop.start(event.messages, event.now)
            else:
                loop.send(event)  # type: ignore[arg-type]
        return loop

    def outstanding_commands(self) -> list[Command]:
        """The commands the state still waits on, as they were sent: what a resumed executor
        (after `load` or `replay`) must carry out again."""
        st = self.state
        if st.phase == "done":
            return [Finish(st.stop_reason, st.output)]
        commands: list[Command] = []
        if st.pending_model is not None:
            commands.append(CallModel(st.pending_model, self._request()))
        for p in st.batch:
            if p.status is _RUNNING:
                commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            elif p.status is _APPROVAL:
                commands.append(AwaitApproval(p.call.id, p.call.name, p.call.arguments))
        return commands

    def outstanding_ids(self) -> frozenset[str]:
        """The ids of the commands the loop still waits on (its model call, each running call,
        each call awaiting approval): an executor may drop work whose id is not among them."""
        st = self.state
        ids = [p.call.id for p in st.batch if p.status is _RUNNING or p.status is _APPROVAL]
        if st.pending_model is not None:
            ids.append(st.pending_model)
        return frozenset(ids)

    def next_deadline(self) -> float | None:
        """When (on the clock that stamps observations) the deadline guard will fire, so an
        executor can send a `Tick` then; None when no deadline can fire any more."""
        st = self.state
        if self._deadline is None or st.started_at is None or st.phase in _PAST_DEADLINES:
            return None
        return st.started_at + self._deadline

    def resume_offset(self, now: float) -> float:
        """What to add to a clock reading `now` so a resumed run's time goes on from its last
        event: time a dumped state spent at rest (a human away, a restart) is not counted."""
        events = self.state.events
        return events[-1].now - now if events else 0.0

    # -- driving -----------------------------------------------------------------------------

    def start(self, prompt: str | Sequence[Message], now: float) -> list[Command]:
        """Begin with a prompt (or a whole conversation ending on the user's side)."""
        st = self.state
        if st.phase != "idle":
            raise ProtocolError(f"start() in phase {st.phase}: a loop starts once")
        messages: list[Message] = [UserMessage(prompt)] if isinstance(prompt, str) else list(prompt)
        problems = history_problems(messages)
        if not messages:
            problems.append(HistoryProblem(0, None, "no messages to start from"))
        elif type(messages[-1]) is AssistantMessage:
            problems.append(HistoryProblem(len(messages) - 1, None, "ends with the model's reply"))
        if problems:
            raise InvalidHistory(problems)
        st.events.append(Started(messages=messages, now=now))
        st.messages.extend(messages)
        st.started_at = now
        st.context_tokens = estimate_tokens(self.spec.system or "") + sum(
            _message_tokens(m) for m in messages
        )
        self._go("start")
        return self._next_turn(now)

    def send(self, obs: Observation) -> list[Command]:
        """Hand the loop one observation; returns the commands it decides on."""
        if type(obs) not in ACCEPTS[self.state.phase]:
            raise ProtocolError(f"cannot accept {obs!r} in phase {self.state.phase}")
        return _HANDLERS[type(obs)](self, obs)

    # Each handler refuses what answers nothing outstanding before it changes anything, then
    # records the observation, then decides.

    def _unmatched(self, obs: ModelReplied | ModelFailed) -> ProtocolError:
        return ProtocolError(
            f"{type(obs).__name__}(command_id={obs.command_id!r}) matches no outstanding "
            f"model call (outstanding: {self.state.pending_model!r})"
        )

    def _call(self, obs: ToolReturned | Approved | Denied, want: CallStatus) -> PendingCall:
        for p in self.state.batch:
            if p.call.id == obs.call_id and p.status is want:
                return p
        found = self._pending(obs.call_id)
        raise ProtocolError(
            f"{type(obs).__name__}(call_id={obs.call_id!r}) does not match a call that is "
            f"{want.value} (that call is {'unknown' if found is None else found.status.value})"
        )

    def _on_failed(self, obs: ModelFailed) -> list[Command]:
        if obs.command_id != self.state.pending_model:
            raise self._unmatched(obs)
        self.state.events.append(obs)
        return self._on_model_failed(obs)

    def _on_returned(self, obs: ToolReturned) -> list[Command]:
        p = self._call(obs, _RUNNING)
        st = self.state
        st.events.append(obs)
        p.result = ToolResult(obs.call_id, obs.content, obs.is_error)
        p.status = _DONE
        now, limit = obs.now, self._deadline
        if len(st.batch) == 1 and (limit is None or now - st.started_at < limit):  # type: ignore[operator]
            return self._complete_batch(now)  # the reply's only call: nothing left to start
        return self._dispatch(now)

    def _on_approved(self, obs: Approved) -> list[Command]:
        p = self._call(obs, _APPROVAL)
        self.state.events.append(obs)
        p.status = _QUEUED
        return self._dispatch(obs.now)

    def _on_denied(self, obs: Denied) -> list[Command]:
        p = self._call(obs, _APPROVAL)
        self.state.events.append(obs)
        self._resolve(p, f"denied by a human: {obs.reason or 'no reason given'}. Do not retry it.")
        return self._dispatch(obs.now)

    def _on_tick(self, obs: Tick) -> list[Command]:
        self.state.events.append(obs)
        if self.state.phase == "finalizing" or not self._deadline_passed(obs.now):
            return []
        return self._stop(StopReason.deadline, _DEADLINE)

    def _on_cancel(self, obs: Cancelled) -> list[Command]:
        self.state.events.append(obs)
        self._abort_batch(f"the run was cancelled ({obs.reason or 'no reason given'})")
        return self._finish(StopReason.cancelled, None)

    # -- model replies -----------------------------------------------------------------------

    def _on_replied(self, obs: ModelReplied) -> list[Command]:
        st = self.state
        if obs.command_id != st.pending_model:
            raise self._unmatched(obs)
        response = obs.response
        calls: list[ToolCall] = []
        for part in response.content:  # a plain loop: a comprehension costs a frame on 3.11
            if type(part) is ToolCall:
                calls.append(part)
        if len(calls) > 1 and len({c.id for c in calls}) < len(calls):
            twice = next(c.id for i, c in enumerate(calls) if c.id in {d.id for d in calls[:i]})
            raise ProtocolError(f"the reply has two tool calls with id {twice!r}")
        st.events.append(obs)
        now = obs.now
        st.pending_model = None
        if st.retries:
            st.retries = 0
        usage = response.usage
        st.usage = st.usage + usage
        st.messages.append(AssistantMessage(response.content))
        if usage.input_tokens:
            st.context_tokens = usage.input_tokens + usage.output_tokens
        else:
            st.context_tokens += _part_tokens(response.content)
        if st.finalizing is not None:
            self._new_batch(calls, "the run is finishing")
            return self._finish(st.finalizing, text_of(response.content))
        st.turns += 1
        stop = response.stop
        if stop in _REFUSALS:
            self._new_batch(calls, f"the reply ended with {stop.value}")
            return self._finish(StopReason.refusal, text_of(response.content))
        if not calls:
            if stop is ModelStop.pause:
                return self._next_turn(now)
            reason = StopReason.max_tokens if stop is ModelStop.max_tokens else StopReason.completed
            return self._finish(reason, text_of(response.content))

        repeated = None
        limit = self._repeat_limit
        counts = st.call_counts
        tools = self._tools
        batch: list[PendingCall] = []
        asks: list[Command] = []
        for call in calls:
            spec = tools.get(call.name)
            p = PendingCall(call, _QUEUED)
            batch.append(p)
            if spec is None or not call.complete or call.raw_arguments is not None:
                problem = _call_problem(call, tools)
                p.status, p.result = _DONE, ToolResult(call.id, problem, True)
            elif spec.finish:
                p.status, p.result = _DONE, ToolResult(call.id, "finished")
            else:
                key = call.name + "\0" + _canonical.encode(call.arguments).decode()
                count = counts[key] = counts.get(key, 0) + 1
                if limit is not None and count >= limit and repeated is None:
                    repeated = (
                        f"{call.name} was already called {count - 1} times with these arguments"
                    )
                elif spec.needs_approval:
                    p.status = _APPROVAL
                    asks.append(AwaitApproval(call.id, call.name, call.arguments))
        st.batch = batch
        if repeated is not None:
            self._abort_batch(repeated)
            return self._finish(StopReason.repeated_call, None)
        if asks:
            if self._deadline_passed(now):
                return self._stop(StopReason.deadline, _DEADLINE)  # before asking for approval
            return asks + self._dispatch(now)
        return self._dispatch(now)

    def _on_model_failed(self, obs: ModelFailed) -> list[Command]:
        st = self.state
        st.pending_model = None
        if obs.retryable and st.retries < self.spec.guards.max_model_retries:
            if st.finalizing is None and self._deadline_passed(obs.now):
                return self._stop(StopReason.deadline)
            st.retries += 1
            return self._call_model("ask_model" if st.finalizing is None else "retry_finalize")
        if st.finalizing is not None:
            return self._finish(st.finalizing, None)
        return self._finish(StopReason.model_error, None)

    # -- tool batches ------------------------------------------------------------------------

    def _pending(self, call_id: str) -> PendingCall | None:
        for p in self.state.batch:
            if p.call.id == call_id:
                return p
        return None

    def _resolve(self, p: PendingCall, error: str) -> None:
        p.status, p.result = _DONE, ToolResult(p.call.id, error, True)

    def _new_batch(self, calls: list[ToolCall], why: str) -> None:
        """Record calls that will never run, each with an error result, so pairing holds."""
        if calls:
            self.state.batch = [PendingCall(c, _QUEUED) for c in calls]
            self._abort_batch(why)

    def _abort_batch(self, why: str) -> None:
        """Give every call still without a result an error result saying `why`, and write the
        batch: results first, so the history stays valid whatever is decided next."""
        st = self.state
        if not st.batch:
            return
        for p in st.batch:
            if p.status is _RUNNING:
                self._resolve(p, f"no result: {why} before this call returned")
            elif p.status is not _DONE:
                self._resolve(p, f"not run: {why}")
        st.messages.append(ToolResults([p.result for p in st.batch]))  # type: ignore[misc]
        st.batch = []

    def _dispatch(self, now: float) -> list[Command]:
        """Start every queued call that may overlap with what is running, in call order.

        A call that is not parallel-safe waits for all calls before it and holds back all
        calls after it; calls naming the same resource run one after another.
        """
        st = self.state
        limit = self._deadline
        if limit is not None and now - st.started_at >= limit:  # type: ignore[operator]
            return self._stop(StopReason.deadline, _DEADLINE)
        tools = self._tools
        commands: list[Command] = []
        busy = _NO_RESOURCES
        running = False
        earlier = False  # an earlier call has no result yet
        for p in st.batch:
            status = p.status
            if status is _DONE:
                continue
            spec = tools.get(p.call.name, _UNLISTED)
            if status is _QUEUED and (spec.resource is None or spec.resource not in busy):
                if spec.parallel_safe or not earlier:
                    p.status = status = _RUNNING
                    commands.append(RunTool(p.call.id, p.call.name, p.call.arguments))
            running = running or status is _RUNNING
            earlier = True
            if not spec.parallel_safe:
                break
            if spec.resource is not None:
                busy = busy | {spec.resource}
        if running:
            st.phase = NEXT[(st.phase, "run_tools")]
            return commands
        if earlier:
            st.phase = NEXT[(st.phase, "await_approval")]
            return commands
        return self._complete_batch(now)

    def _complete_batch(self, now: float) -> list[Command]:
        st = self.state
        batch = st.batch
        results: list[ToolResult] = []
        round_ = []
        tokens = 0
        failed = True
        finish: ToolCall | None = None
        for p in batch:
            call, r = p.call, p.result
            assert r is not None
            results.append(r)
            round_.append((call.name, call.arguments, r.content, r.is_error))
            tokens += estimate_tokens(r.content)
            failed = failed and r.is_error
            if finish is None and not r.is_error and call.name in self._finishers:
                finish = call
        st.messages.append(ToolResults(results))
        st.batch = []
        st.context_tokens += tokens
        if finish is not None:
            return self._finish(StopReason.finish_tool, finish.arguments)
        st.failed_rounds = st.failed_rounds + 1 if failed else 0
        st.round_digests.append(str(_crc32(_canonical.encode(round_))))
        k = self._stall
        if k is not None and len(st.round_digests) > 3 * k:
            del st.round_digests[0]
        return self._next_turn(now)

    # -- deciding what comes next ------------------------------------------------------------

    def _next_turn(self, now: float) -> list[Command]:
        """Between turns: a stop condition, then each guard in order, else ask the model."""
        st = self.state
        for condition in self.spec.stop_when:
            if condition(st):
                return self._finish(StopReason.stop_condition, None)
        limit = self._deadline
        if limit is not None and now - st.started_at >= limit:  # type: ignore[operator]
            return self._stop(StopReason.deadline)
        if self._max_turns is not None and st.turns >= self._max_turns:
            return self._stop(StopReason.max_turns)
        if self._budget is not None and st.context_tokens > self._budget:
            return self._stop(StopReason.context_budget)
        if self._max_failed is not None and st.failed_rounds >= self._max_failed:
            return self._finish(StopReason.tool_errors, None)
        k = self._stall
        digests = st.round_digests
        # a cycle can only end here if the last round repeats one of the three before it
        if k is not None and digests and digests[-1] in digests[-4:-1] and _stalled(digests, k):
            return self._finish(StopReason.no_progress, None)
        return self._call_model("ask_model")

    def _stop(self, reason: StopReason, why: str = "") -> list[Command]:
        """A guard tripped: write results for calls left open, then finalize or finish."""
        st = self.state
        self._abort_batch(why)
        if reason in _BUDGET_REASONS and self.spec.guards.finalize and st.turns > 0:
            st.finalizing = reason
            st.messages.append(UserMessage(self.spec.guards.finalize_prompt))
            return self._call_model("finalize")
        return self._finish(reason, None)

    def _call_model(self, trigger: str) -> list[Command]:
        st = self.state
        st.model_calls += 1
        st.pending_model = command_id = f"model-{st.model_calls}"
        st.phase = NEXT[(st.phase, trigger)]
        return [CallModel(command_id, self._request())]

    def _request(self) -> ModelRequest:
        st = self.state
        if st.finalizing is None:
            return ModelRequest(
                self.spec.system,
                History(st.messages, len(st.messages)),
                self.spec.tools,
                self.spec.max_tokens,
            )
        return ModelRequest(
            self.spec.system, History(st.messages), (), self.spec.max_tokens, Purpose.finalize
        )

    def _finish(self, reason: StopReason, output: Any) -> list[Command]:
        st = self.state
        st.stop_reason = reason
        st.output = output
        st.pending_model = None
        self._go("finish")
        return [Finish(reason, output)]

    def _deadline_passed(self, now: float) -> bool:
        started, limit = self.state.started_at, self._deadline
        return limit is not None and started is not None and now - started >= limit

    def _go(self, trigger: str) -> None:
        self.state.phase = NEXT[(self.state.phase, trigger)]


_HANDLERS: dict[type, Any] = {
    ModelReplied: Loop._on_replied,
    ModelFailed: Loop._on_failed,
    ToolReturned: Loop._on_returned,
    Approved: Loop._on_approved,
    Denied: Loop._on_denied,
    Tick: Loop._on_tick,
    Cancelled: Loop._on_cancel,
}


def _call_problem(call: ToolCall, tools: dict[str, ToolSpec]) -> str:
    """Why a call must not run (cut off, invalid JSON, unknown tool), as a message the model
    can act on."""
    if not call.complete:
        return (
            "not run: the reply hit its max_tokens limit before this call's arguments were "
            "complete. Make the call again, with shorter arguments if you can."
        )
    if call.raw_arguments is not None:
        raw = (
            call.raw_arguments if len(call.raw_arguments) <= 200 else call.raw_arguments[:200] + "…"
        )
        return f"arguments were not valid JSON: {raw!r}. Send the arguments as one JSON object."
    available = ", ".join(sorted(tools)) or "none"
    return f"unknown tool {call.name!r}. Available tools: {available}."


def _stalled(digests: list[str], k: int) -> bool:
    """True when the last rounds repeat one block of 1 to 3 rounds `k` times (A-A-A, A-B-A-B…)."""
    n = len(digests)
    for period in (1, 2, 3):
        span = period * k
        if n >= span and all(
            digests[n - i] == digests[n - i - period] for i in range(1, span - period + 1)
        ):
            return True
    return False
