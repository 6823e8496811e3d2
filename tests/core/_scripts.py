"""Random specs and worlds for the property tests, and `Run`: a driver that checks every step.

A world is drawn step by step from hypothesis' `data`, so a failing run shrinks to a short one.
`Run` plays a strict executor: it keeps what it still owes the loop (`waiting`) from the commands
it was given, and after every step checks that the loop waits on exactly that, that scheduling
rules held and that the ledger is valid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from hypothesis import strategies as st
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Cancelled,
    CheckGuardrail,
    Command,
    Compaction,
    Denied,
    Finish,
    GuardrailChecked,
    Guards,
    InvalidHistory,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    Price,
    ProtocolError,
    Resumed,
    RunTool,
    StopReason,
    Tick,
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.conditions import HasToolCall, TextContains, TurnCountIs
from turnstile.core.guardrails import Guardrail
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
    text_of,
    validate_history,
)
from turnstile.core.request import Purpose

from tests.steps import call_ids

PENDING_PHASES = ("awaiting_tools", "awaiting_approval", "checking")
BUDGET_REASONS = (
    StopReason.max_turns,
    StopReason.deadline,
    StopReason.context_budget,
    StopReason.cost_budget,
)
COMPACTIONS = [
    None,
    None,
    Compaction(strategy="clear_tool_results", keep_turns=1),
    Compaction(strategy="drop_turns"),
    Compaction(strategy="summarize", keep_turns=1, target=0.3),
]
MODELS = ("m1", "m2", "m3")
PRICES = {m: Price(input=1_000.0, output=2_000.0) for m in MODELS}  # a call of 400 tokens: 0.4
UNKNOWN_TOOL = "nope"
ARGUMENTS: list[dict[str, Any]] = [{}, {"x": 1}, {"x": 2}, {"q": "a", "deep": [1, {"k": None}]}]
TIME_STEPS = [0.0, 1.0, 4.0, 0.5]
REFUSALS = (ModelStop.refusal, ModelStop.content_filter)
RAILS = [  # guardrails a spec may have: none, one of each kind, all three
    (),
    (),
    (Guardrail("pii", "input"),),
    (Guardrail("safe", "tool_call"),),
    (Guardrail("tone", "final"),),
    (Guardrail("pii", "input"), Guardrail("safe", "tool_call"), Guardrail("tone", "final")),
]
ODD_STOPS = [  # stop values a reply may carry whatever it holds
    ModelStop.refusal,
    ModelStop.content_filter,
    ModelStop.max_tokens,
    ModelStop.pause,
    ModelStop.pause,
    ModelStop.other,
    ModelStop.stop_sequence,
    ModelStop.end_turn,
]


def key(command: Command) -> tuple[str, str]:
    return type(command).__name__, getattr(command, "id", "")


def by_key(commands: Sequence[Command]) -> list[Command]:
    return sorted(commands, key=key)


@st.composite
def specs(
    draw: st.DrawFn, *, guards: Guards | None = None, stop_when: tuple[Any, ...] | None = None
) -> LoopSpec:
    """2–4 tools with random scheduling flags; random guards (some off) and stop conditions
    unless given (and then, sometimes, guardrails); sometimes fallback models (priced, maybe
    with a cost budget) and compaction (in a window that fills in a few turns)."""
    tools = tuple(
        ToolSpec(
            f"t{i}",
            parallel_safe=draw(st.booleans()),
            resource=draw(st.sampled_from([None, None, "db", "fs"])),
            finish=draw(st.integers(0, 19)) == 5,
            needs_approval=draw(st.booleans()),
            replay_safe=draw(st.booleans()),
        )
        for i in range(draw(st.integers(2, 4)))
    )
    models = draw(st.sampled_from([(), (), MODELS[:2], MODELS]))
    random_guards = guards is None  # a world of its own answers no guardrails: none then
    if guards is None:
        guards = Guards(
            max_cost=draw(st.sampled_from([None, 1.0, 3.0])) if models else None,
            max_turns=draw(st.sampled_from([6, 2, None, 1, 4, 8])),
            deadline_s=draw(st.sampled_from([None, 4.0, 12.0, 40.0])),
            context_window=draw(st.sampled_from([None, 400, 2000])),
            reserve_tokens=draw(st.sampled_from([0, 100])),
            max_repeated_calls=draw(st.sampled_from([None, 2, 3, 5])),
            max_stalled_rounds=draw(st.sampled_from([None, 2, 3])),
            max_failed_rounds=draw(st.sampled_from([None, 2, 3])),
            max_model_retries=draw(st.sampled_from([2, 0, 1, 3])),
            finalize=draw(st.booleans()),
        )
    if stop_when is None:
        stop_when = draw(
            st.sampled_from(
                [(), (TurnCountIs(5),), (HasToolCall("t1"),), (TextContains("done"),), ()]
            )
        )
    system = draw(st.sampled_from([None, "be brief"]))
    compaction = draw(st.sampled_from(COMPACTIONS)) if guards.context_window else None
    guardrails = draw(st.sampled_from(RAILS)) if random_guards else ()
    return LoopSpec(
        guardrails=guardrails,
        system=system,
        tools=tools,
        guards=guards,
        stop_when=stop_when,
        max_tokens=512,
        models=models,
        prices=PRICES if models else {},
        compaction=compaction,
    )


def draw_call(data: st.DataObject, call_id: str, names: list[str]) -> ToolCall:
    """A call of a known or unknown tool; sometimes invalid JSON or cut off by max_tokens."""
    name = data.draw(st.sampled_from(names))
    kind = data.draw(st.integers(0, 9))
    if kind == 4:
        return ToolCall(call_id, name, {}, raw_arguments='{"x": 1')
    arguments = data.draw(st.sampled_from(ARGUMENTS))
    return ToolCall(call_id, name, arguments, complete=kind != 5)


def draw_response(
    data: st.DataObject, calls: list[ToolCall], *, calm: bool = False
) -> ModelResponse:
    """A reply around `calls`: maybe thinking, maybe text, usually the stop value that fits, now
    and then any other one (in a `calm` world never a refusal); random usage."""
    content: list[Part] = []
    if data.draw(st.booleans()):
        content.append(Thinking("hmm", signature="sig"))
    text = data.draw(st.sampled_from(["", "ok", "done", "ok", ""]))
    if text:
        content.append(Text(text))
    content.extend(calls)
    odd = data.draw(st.integers(0, 79)) - 30
    if 0 <= odd < len(ODD_STOPS) and not (calm and ODD_STOPS[odd] in REFUSALS):
        stop = ODD_STOPS[odd]
    else:
        stop = ModelStop.tool_use if calls else ModelStop.end_turn
    usage = Usage(data.draw(st.integers(0, 400)), data.draw(st.integers(0, 50)))
    return ModelResponse(
        content, stop, usage, raw_stop="weird" if stop is ModelStop.other else None
    )


def last_reply_calls(messages: Sequence[Any]) -> dict[str, ToolCall]:
    for message in reversed(messages):
        if type(message) is AssistantMessage:
            return {p.id: p for p in message.content if type(p) is ToolCall}
    return {}


class Run:
    """A loop driven by a strict executor that checks the loop after every step."""

    def __init__(self, spec: LoopSpec) -> None:
        self.spec = spec
        self.loop = Loop(spec)
        self.tools = {t.name: t for t in spec.tools}
        self.now = 0.0
        self.observations: list[Observation] = []
        self.commands: list[list[Command]] = []  # [0] from start(), [i] after observations[i-1]
        self.waiting: list[Command] = []  # what this executor still owes the loop
        self.snapshots: list[list[Command]] = []  # `waiting` after each step
        self.finish: Finish | None = None
        self.calls = 0
        self.model_calls: list[CallModel] = []
        self.finalized_for: StopReason | None = None  # the budget a finalize call was for
        self.human_s = 0.0  # time spent waiting only for approvals: not the run's
        self.ran: set[str] = set()
        self.started: set[str] = set()  # calls the executor said it began to run
        self.resumed = False  # the step under way is a Resumed: commands may be handed out again
        self.asked: set[str] = set()
        self.approved: set[str] = set()
        self.passed: set[str] = set()  # guardrail checks that answered and passed
        self.returned: dict[str, ToolResult] = {}
        self.usage = Usage()
        self.turn_replies = 0
        self.calm = False
        self.unmetered = False  # replies carry no usage: the loop counts the context itself

    @property
    def state(self) -> Any:
        return self.loop.state

    def new_call_id(self) -> str:
        self.calls += 1
        return f"call-{self.calls}"

    def start(self, prompt: str = "hi") -> list[Command]:
        return self._take(self.loop.start(prompt, self.now), None)

    def send(self, obs: Observation) -> list[Command]:
        if self.waiting and all(type(c) is AwaitApproval for c in self.waiting):
            self.human_s += obs.now - self.now  # only a human could move the run on
        answered = self._answered(obs)
        if type(obs) is ModelReplied:
            self.usage += obs.response.usage
            self.turn_replies += answered.request.purpose is Purpose.turn  # type: ignore[union-attr]
        commands = self.loop.send(obs)
        self.observations.append(obs)
        self.now = obs.now
        if answered is not None:
            self.waiting.remove(answered)
        self.resumed = type(obs) is Resumed
        if self.resumed:
            self.waiting = []  # a new process: what it was handed before is gone
        if type(obs) is ToolStarted:
            self.started.add(obs.call_id)
        elif type(obs) is ToolReturned:
            self.returned[obs.call_id] = ToolResult(obs.call_id, obs.content, obs.is_error)
        elif type(obs) is Approved:
            self.approved.add(obs.call_id)
        elif type(obs) is GuardrailChecked and not obs.tripped:
            self.passed.add(obs.check_id)
        return self._take(commands, obs)

    def _answered(self, obs: Observation) -> Any:
        wanted = {
            ModelReplied: CallModel,
            ModelFailed: CallModel,
            ToolReturned: RunTool,
            Approved: AwaitApproval,
            Denied: AwaitApproval,
            GuardrailChecked: CheckGuardrail,
        }.get(type(obs))
        if wanted is None:
            return None
        target = (
            getattr(obs, "command_id", None)
            or getattr(obs, "call_id", None)
            or getattr(obs, "check_id", None)
        )
        [command] = [c for c in self.waiting if type(c) is wanted and c.id == target]
        return command

    def _take(self, commands: list[Command], obs: Observation | None) -> list[Command]:
        st_ = self.state
        calls = last_reply_calls(st_.messages)
        fresh: list[Command] = []
        for c in commands:
            if type(c) is CallModel:
                self._check_call_model(c)
                # asking the model again drops everything asked before, but the input's checks
                self.waiting = [w for w in self.waiting if type(w) is CheckGuardrail]
            elif type(c) is Finish:
                assert commands == [c], f"Finish must come alone: {commands}"
                assert c.reason is not StopReason.unknown
                assert (c.reason, c.output) == (st_.stop_reason, st_.output)
                assert st_.phase == "done"
                self.finish = c
                self.waiting = []
                self._check_answer(c)
            elif type(c) is CheckGuardrail:
                assert c.id not in self.passed, f"{c.id} asked again after it passed"
            else:
                self._check_tool_command(c, calls)
            if type(c) is not Finish:
                fresh.append(c)
        self.waiting += fresh
        self.waiting.sort(key=lambda c: type(c) is CheckGuardrail)  # (as the loop lists them)
        self.commands.append(commands)
        self.snapshots.append(list(self.waiting))
        self._check_state(obs)
        return commands

    def _check_call_model(self, c: CallModel) -> None:
        st_ = self.state
        request = c.request
        validate_history(request.messages)
        sent = list(request.messages)
        if not st_.compactions and request.purpose is not Purpose.summarize:
            assert sent == st_.messages, "a request shows the whole ledger"
        else:  # compacted: replies are sent whole, the older ones left out, never changed
            replies = [m for m in st_.messages if type(m) is AssistantMessage]
            shown = [m for m in sent if type(m) is AssistantMessage]
            at = next((i for i, m in enumerate(replies) if shown and m is shown[0]), 0)
            assert replies[at : at + len(shown)] == shown, "replies are sent whole, in a run"
            if request.purpose is not Purpose.summarize:
                assert at + len(shown) == len(replies), "only the older replies are left out"
        assert (request.system, request.max_tokens) == (self.spec.system, self.spec.max_tokens)
        models = self.spec.models
        assert request.model == (models[st_.model_index] if models else None)
        if request.purpose is Purpose.summarize:
            assert st_.phase == "compacting" and request.tool_choice == "none"
            assert request.messages[-1] == UserMessage(self.spec.compaction.prompt)  # type: ignore[union-attr]
            assert tuple(request.tools) == self.spec.tools
        elif request.purpose is Purpose.finalize:
            assert tuple(request.tools) == ()
            assert request.messages[-1] == UserMessage(self.spec.guards.finalize_prompt)
            assert st_.phase == "finalizing" and st_.stop_reason in BUDGET_REASONS
            self.finalized_for = st_.stop_reason
        else:
            assert tuple(request.tools) == self.spec.tools
        asked_again = self.resumed and c.id == self.model_calls[-1].id
        assert asked_again or all(m.id != c.id for m in self.model_calls), f"{c.id} reused"
        if not asked_again:
            self.model_calls.append(c)

    def _check_tool_command(self, c: Command, calls: dict[str, ToolCall]) -> None:
        assert type(c) in (RunTool, AwaitApproval)
        assert c.id in calls, f"{c} names no call of the last reply"
        call = calls[c.id]
        spec = self.tools.get(call.name)
        assert (c.name, c.arguments) == (call.name, call.arguments)  # type: ignore[attr-defined]
        assert call.complete and call.raw_arguments is None, f"{c} for an invalid call"
        assert spec is not None and not spec.finish, f"{c} for an unknown or finish tool"
        again = self.resumed and (c.id not in self.started or spec.replay_safe)
        for rail in self.spec.guardrails:  # nothing runs, nor is asked, before its checks passed
            at = {"input": self.model_calls[0].id, "tool_call": c.id}.get(rail.on)
            assert at is None or f"{at}/{rail.on}/{rail.name}" in self.passed, f"{c} unchecked"
        if type(c) is RunTool:
            assert c.id not in self.ran or again, f"{c.id} ran twice"
            assert not spec.needs_approval or c.id in self.approved, f"{c.id} ran unapproved"
            self.ran.add(c.id)
            self.started.discard(c.id)
        else:
            assert spec.needs_approval and (c.id not in self.asked or self.resumed)
            self.asked.add(c.id)

    def _check_answer(self, finish: Finish) -> None:
        """A run that finishes with the model's answer does so once its checks passed."""
        if finish.reason in (StopReason.completed, StopReason.finish_tool):
            for rail in self.spec.guardrails:
                if rail.on == "final":
                    at = f"{self.model_calls[-1].id}/final/{rail.name}"
                    assert at in self.passed, f"{finish} before {at} passed"

    def _check_state(self, obs: Observation | None) -> None:
        st_ = self.state
        deadline = self.spec.guards.deadline_s
        late = obs is not None and obs.now - self.human_s >= (deadline or math.inf)
        if late and type(obs) is not ToolStarted:  # a call's start is bookkeeping, not a step
            assert st_.phase in ("done", "finalizing"), "the deadline passed but the run goes on"
        outstanding = self.loop.outstanding_commands()
        if self.finish is not None:
            assert outstanding == [self.finish]
        else:
            assert by_key(outstanding) == by_key(self.waiting), "the loop waits on what it asked"
        running = [self.tools[c.name] for c in outstanding if type(c) is RunTool]
        if any(type(c) is CheckGuardrail for c in outstanding):
            assert not running and st_.phase in ("awaiting_model", "compacting", "checking")
        if len(running) > 1:
            assert all(t.parallel_safe for t in running), f"a serial call overlapped: {running}"
            resources = [t.resource for t in running if t.resource is not None]
            assert len(resources) == len(set(resources)), f"a resource overlapped: {running}"
        validate_history(st_.messages, allow_pending=st_.phase in PENDING_PHASES)
        assert st_.model_calls == len(self.model_calls)

    def check_finished(self) -> None:
        """The run's end: one Finish, a valid ledger, results as the executor gave them."""
        st_ = self.state
        finish = self.finish
        assert finish is not None and st_.phase == "done"
        validate_history(st_.messages)
        replies = {}
        previous = None
        for message in st_.messages:
            if type(message) is ToolResults:
                calls = [p for p in previous.content if type(p) is ToolCall]
                assert [r.call_id for r in message.results] == [p.id for p in calls]
                replies.update({p.id: p for p in calls})
                for result in message.results:
                    self._check_result(result, replies[result.call_id])
            previous = message
        assert st_.usage == self.usage
        assert st_.turns == self.turn_replies
        guards = self.spec.guards
        assert guards.max_turns is None or st_.turns <= guards.max_turns
        last = self.observations[-1] if self.observations else None
        reason = finish.reason
        if reason is StopReason.max_turns:
            assert st_.turns == guards.max_turns
        elif reason is StopReason.cancelled:
            assert type(last) is Cancelled
        elif reason is StopReason.model_error:
            assert type(last) is ModelFailed
        elif reason is StopReason.guardrail:
            assert type(last) is GuardrailChecked and last.tripped
            assert finish.output["message"] == last.message
        elif reason is StopReason.completed:
            replied = [o for o in self.observations if type(o) is ModelReplied][-1]
            assert finish.output == text_of(replied.response.content)
        elif reason is StopReason.finish_tool:
            calls = last_reply_calls(st_.messages).values()
            finishing = [c for c in calls if c.name in self.tools and self.tools[c.name].finish]
            assert any(c.arguments == finish.output for c in finishing)
        if self.finalized_for is not None:
            assert guards.finalize
            assert reason in (self.finalized_for, StopReason.cancelled)

    def _check_result(self, result: ToolResult, call: ToolCall) -> None:
        if call.id in self.returned:
            assert result == self.returned[call.id], "a result is written as it came back"
        elif not result.is_error:
            assert self.tools[call.name].finish and result.content == "finished"


def check_consistent(spec: LoopSpec, loop: Loop, commands: list[Command]) -> None:
    """After an accepted observation: a valid ledger, a phase that matches what the loop waits
    on, commands the loop will accept answers to, and a dump that loads back equal."""
    st_ = loop.state
    phase = st_.phase
    validate_history(st_.messages, allow_pending=phase in PENDING_PHASES)
    outstanding = loop.outstanding_commands()
    for c in outstanding:
        if type(c) is CallModel:  # what a resumed executor sends again
            validate_history(c.request.messages)
    for c in commands:
        if type(c) is Finish:
            assert commands == [c] and phase == "done", f"Finish must come alone: {commands}"
        else:
            assert c in outstanding, f"{c} was sent but the loop does not wait for it"
    statuses = {p.status.value for p in st_.round}
    if phase == "done":
        assert st_.stop_reason is not StopReason.unknown
        assert st_.pending_model is None and not st_.round
        assert outstanding == [Finish(st_.stop_reason, st_.output)]
    elif phase in ("awaiting_model", "finalizing", "compacting"):
        assert st_.pending_model is not None and not st_.round
        assert (st_.stop_reason is not StopReason.unknown) == (phase == "finalizing")
        assert (st_.summarizing is not None) == (phase == "compacting")
    elif phase == "awaiting_tools":
        assert st_.pending_model is None and statuses & {"running", "started"}
    elif phase == "awaiting_approval":
        assert st_.pending_model is None and "approval" in statuses
        assert not statuses & {"running", "started"}
    elif phase == "checking":
        assert st_.pending_model is None and st_.checks
        assert not statuses & {"running", "started"}
    else:
        assert phase == "idle" and outstanding == []
    loaded = Loop.load(spec, loop.dump())
    assert loaded.state == st_ and loaded.dump() == loop.dump()


def refused_or_valid(spec: LoopSpec, loop: Loop, act: Callable[[], list[Command]]) -> bool:
    """Do `act`: either a typed refusal (ProtocolError, or InvalidHistory from `start`) that left
    the dump byte-identical (False), or an accepted step after which the loop is consistent
    (True)."""
    before = loop.dump()
    try:
        commands = act()
    except (ProtocolError, InvalidHistory):
        assert loop.dump() == before, "a refused observation changed the state"
        return False
    check_consistent(spec, loop, commands)
    return True


def world_step(data: st.DataObject, run: Run) -> Observation:
    """The world's next observation: mostly an answer to something outstanding. A `calm` world
    never cancels, fails or replies without calls, so its runs end by the spec's own rules."""
    calm = run.calm
    choice = data.draw(st.integers(0, 39))  # hypothesis favours the ends: keep rare cases inside
    now = run.now + data.draw(st.sampled_from(TIME_STEPS))
    if choice == 17 and not calm:
        return Cancelled(reason=data.draw(st.sampled_from(["", "user left"])), now=now)
    if choice == 18 and not calm:
        return Resumed(now=now)  # a crash: another process takes the run over
    if 20 <= choice < 24 or not run.waiting:
        return Tick(now=now)
    command = data.draw(st.sampled_from(run.waiting))
    if type(command) is CheckGuardrail:
        tripped = data.draw(st.integers(0, 5)) == 3
        return GuardrailChecked(command.id, tripped, "no" if tripped else "", now=now)
    if type(command) is RunTool and command.id not in run.started and data.draw(st.booleans()):
        return ToolStarted(command.id, now=now)
    if type(command) is CallModel:
        if not calm and data.draw(st.integers(0, 11)) == 5:
            retryable = data.draw(st.integers(0, 3)) > 0
            return ModelFailed(command.id, "overloaded", retryable, now=now)
        names = [t.name for t in run.spec.tools] + [UNKNOWN_TOOL]
        n = data.draw(st.sampled_from([1, 1, 1, 1, 2, 2, 2, 0, 2, 3, 3, 3, 1]))
        calls = [draw_call(data, run.new_call_id(), names) for _ in range(max(n, calm))]
        response = draw_response(data, calls, calm=calm)
        if run.unmetered:
            response = msgspec.structs.replace(response, usage=Usage())
        return ModelReplied(command.id, response, now=now)
    if type(command) is RunTool:
        content = data.draw(st.sampled_from(["ok", "boom", "42", "ok " * 200]))
        return ToolReturned(command.id, content, content == "boom", now=now)
    if data.draw(st.integers(0, 2)) < 2:
        return Approved(command.id, now=now)
    return Denied(command.id, data.draw(st.sampled_from(["", "too risky"])), now=now)


def drive(
    data: st.DataObject,
    run: Run,
    *,
    steps: int = 60,
    cancel: bool = True,
    on_step: Callable[[Run], None] | None = None,
) -> Run:
    """Start `run` and play the world until Finish; after `steps` observations cancel (or stop
    there when `cancel` is off)."""
    run.calm = data.draw(st.booleans())
    run.start()
    while run.finish is None:
        if len(run.observations) >= steps:
            if not cancel:
                break
            run.send(Cancelled(reason="enough", now=run.now))
        else:
            run.send(world_step(data, run))
        if on_step is not None:
            on_step(run)
    return run


def odd_observation(data: st.DataObject, spec: LoopSpec, loop: Loop) -> Observation:
    """Any observation, often for the wrong phase or naming wrong, stale or repeated ids."""
    st_ = loop.state
    last = st_.events[-1].now if st_.events else 0.0
    model_ids = sorted({st_.pending_model or "model-1", "model-1", f"model-{st_.model_calls + 1}"})
    ids = [*sorted(set(call_ids(st_.messages))), "ghost"]
    kind = data.draw(st.integers(0, 7))
    now = last + data.draw(st.sampled_from([*TIME_STEPS, 100.0]))
    if kind == 0:
        tag = f"fz{len(st_.events)}-"
        pool = [tag + "a", tag + "b", tag + "c", *ids]
        names = [t.name for t in spec.tools] + [UNKNOWN_TOOL]
        ids = data.draw(st.lists(st.sampled_from(pool), max_size=3))
        response = draw_response(data, [draw_call(data, i, names) for i in ids])
        return ModelReplied(data.draw(st.sampled_from(model_ids)), response, now=now)
    if kind == 1:
        retryable = data.draw(st.booleans())
        return ModelFailed(data.draw(st.sampled_from(model_ids)), "boom", retryable, now=now)
    call_id = data.draw(st.sampled_from(ids))
    if kind == 2:
        return ToolReturned(call_id, "ok", data.draw(st.booleans()), now=now)
    if kind == 3:
        return Approved(call_id, now=now)
    if kind == 4:
        return Denied(call_id, now=now)
    if kind == 5:
        return Tick(now=now)
    if kind == 6:
        checks = [c.id for c in st_.checks or ()]
        check_id = data.draw(st.sampled_from([*checks, "ghost", f"{call_id}/tool_call/safe"]))
        return GuardrailChecked(check_id, data.draw(st.booleans()), now=now)
    return Cancelled(now=now)
