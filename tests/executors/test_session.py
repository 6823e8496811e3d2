"""`Session`, the executor protocol without I/O: driven here by a plain-Python driver over
scripted I/O (no threads, no event loop, no Temporal), which the conformance suite runs too."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Command,
    Guards,
    Loop,
    LoopSpec,
    ModelError,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    Observation,
    Resumed,
    RunTool,
    StopReason,
    Tick,
    Tool,
    ToolReturned,
    ToolStarted,
    tool,
)
from turnstile.core.messages import Message, ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import Journal, Run, ScriptedModel, ToolRunner, sync
from turnstile.executors._effects import answer, model_failed
from turnstile.executors._session import Session
from turnstile.executors._toolbox import as_runner, caller


class ScriptedIO:
    """A driver that only does I/O, in plain Python: the work the session hands out together is
    carried out last first, time passes only when the loop asks to wait (or `work_s` per
    command), and a model reply is whatever `model` returns, a `ModelResponse` or not."""

    def __init__(
        self,
        model: Callable[[ModelRequest], object],
        tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
        *,
        approve: Callable[[AwaitApproval], bool | str] | None = None,
        work_s: float = 0.0,
    ) -> None:
        self.model = model
        self.runner = as_runner(tools)
        self.approve = approve
        self.work_s = work_s
        self.time = 0.0
        self.steps: list[Command | Observation] = []

    def session(
        self,
        spec: LoopSpec,
        prompt: str | Sequence[Message] | None = None,
        *,
        loop: Loop | None = None,
        journal: Journal | None = None,
    ) -> Session:
        return Session(
            spec,
            prompt,
            loop=loop,
            tool_specs=self.runner.specs,
            clock=lambda: self.time,
            journal=journal,
        )

    def drive(self, session: Session) -> Run:
        run_call = caller(self.runner)
        in_flight = session.hand_out(session.start(), self.approve is not None)
        while session.finish is None and in_flight:
            command = in_flight.pop()
            self.steps.append(command)
            self.time += self.work_s
            if session.alarm(0.0) == 0.0 and (tick := session.tick()) is not None:
                in_flight += session.hand_out(session.send(tick), self.approve is not None)
            if session.stale([command.id]):  # type: ignore[union-attr]
                continue
            obs = self.carry_out(session, command, run_call)
            self.steps.append(obs)
            in_flight += session.hand_out(session.send(obs), self.approve is not None)
            gone = set(session.stale(c.id for c in in_flight))  # type: ignore[union-attr]
            in_flight = [c for c in in_flight if c.id not in gone]  # type: ignore[union-attr]
        return session.run()

    def carry_out(
        self, session: Session, command: Command, run_call: Callable[[RunTool], Any]
    ) -> Observation:
        match command:
            case CallModel():
                self.time += session.wait(command)
                session.calling(command)
                try:
                    reply = self.model(command.request)
                except Exception as e:
                    return model_failed(command.id, e, self.time)
                return ModelReplied(command.id, reply, now=self.time)  # type: ignore[arg-type]
            case RunTool():
                outcome = run_call(command)
                return ToolReturned(command.id, outcome.content, outcome.is_error, now=self.time)
            case AwaitApproval():
                assert self.approve is not None
                return answer(command, self.approve(command), self.time)
        raise TypeError(f"unknown command {command!r}")


def scripted(replies: list[ModelResponse]) -> Callable[[ModelRequest], ModelResponse]:
    return ScriptedModel(replies).complete


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def calls(*names: str) -> ModelResponse:
    parts = [ToolCall(f"c{i}", "weather", {"city": n}) for i, n in enumerate(names)]
    return ModelResponse(parts, ModelStop.tool_use)


def text(s: str) -> ModelResponse:
    return ModelResponse([Text(s)], ModelStop.end_turn)


def test_a_tool_start_is_recorded_before_anything_of_its_batch_runs() -> None:
    io = ScriptedIO(scripted([calls("Paris", "Oslo"), text("done")]), [weather])
    session = io.session(LoopSpec(), "weather?")
    run = io.drive(session)
    assert run.output == "done"
    kinds = [type(e).__name__ for e in run.state.events]
    first_result = kinds.index("ToolReturned")
    assert kinds[first_result - 2 : first_result] == ["ToolStarted", "ToolStarted"]


def test_each_step_hands_back_the_events_it_recorded(tmp_path: Path) -> None:
    with Journal(tmp_path / "run.journal") as journal:
        io = ScriptedIO(scripted([calls("Paris"), text("done")]), [weather])
        session = io.session(LoopSpec(), "weather?", journal=journal)
        [call] = session.start()
        assert [type(e).__name__ for e in session.recorded] == ["Started"]
        reply = io.carry_out(session, call, caller(io.runner))
        [tool_call] = session.send(reply)
        assert [type(e) for e in session.recorded] == [ModelReplied]
        assert session.hand_out([tool_call], approving=False) == [tool_call]
        assert [type(e) for e in session.recorded] == [ToolStarted]
        assert journal.events == session.loop.state.events


def test_a_reply_that_is_no_model_response_fails_the_run_for_good() -> None:
    io = ScriptedIO(lambda request: "not a response")
    run = io.drive(io.session(LoopSpec(), "hi"))
    assert run.stop_reason is StopReason.model_error
    [failed] = [e for e in run.state.events if type(e) is ModelFailed]
    assert "not a valid reply" in failed.message and not failed.retryable


def test_a_retry_waits_for_its_not_before_on_the_sessions_clock() -> None:
    replies: list[object] = []

    def model(request: ModelRequest) -> ModelResponse:
        replies.append(request)
        if len(replies) == 1:
            raise ModelError("busy", retryable=True, retry_after=30.0)
        return text("done")

    io = ScriptedIO(model)
    run = io.drive(io.session(LoopSpec(), "hi"))
    assert run.output == "done"
    assert io.time >= 30.0 and run.state.events[-1].now == io.time


def test_a_passed_deadline_ticks_and_drops_the_work_the_loop_gave_up_on() -> None:
    spec = LoopSpec(guards=Guards(deadline_s=5.0))
    io = ScriptedIO(scripted([calls("Paris", "Oslo", "Rome"), text("done")]), [weather], work_s=2)
    run = io.drive(io.session(spec, "weather?"))
    assert run.stop_reason is StopReason.deadline
    ran = [s.call_id for s in io.steps if type(s) is ToolReturned]
    assert ran == ["c2"]  # the others were stale once the deadline passed


def test_approvals_no_one_answers_are_left_waiting() -> None:
    spec = LoopSpec(tools=(msgspec.structs.replace(weather.spec, needs_approval=True),))
    io = ScriptedIO(scripted([calls("Paris"), text("done")]), [weather])
    run = io.drive(io.session(spec, "weather?"))
    assert run.finish is None and [c.id for c in run.waiting] == ["c0"]
    again = ScriptedIO(scripted([text("done")]), [weather], approve=lambda c: True)
    resumed = again.drive(again.session(spec, loop=run.loop))
    assert resumed.output == "done"


def test_a_journal_holding_a_run_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    with Journal(path) as journal:
        io = ScriptedIO(scripted([calls("Paris")]), [weather])
        session = io.session(LoopSpec(), "weather?", journal=journal)
        [call] = session.start()
        session.send(io.carry_out(session, call, caller(io.runner)))
    with Journal(path) as journal:
        io = ScriptedIO(scripted([text("done")]), [weather])
        with pytest.raises(ValueError, match="another prompt"):
            io.session(LoopSpec(), "something else", journal=journal)
        run = io.drive(io.session(LoopSpec(), journal=journal))
    assert run.output == "done"
    assert Journal.read(path) == run.state.events


def test_a_model_call_whose_start_is_stale_is_never_made() -> None:
    io = ScriptedIO(scripted([text("done")]))
    session = io.session(LoopSpec(), "hi")
    [call] = session.start()
    assert session.begin(call)
    session.send(ModelReplied(call.id, text("done"), now=0.0))
    tool_call = RunTool("gone", "weather", {"city": "Paris"})
    assert not session.begin(tool_call)


@tool(needs_approval=True)
def wire(amount: int) -> str:
    """Wire money: a person approves each transfer."""
    return f"wired {amount}"


def test_one_command_at_a_time_each_is_begun_and_what_no_one_answers_waits() -> None:
    io = ScriptedIO(scripted([text("done")]), [weather, wire])
    session = io.session(LoopSpec(), "pay")
    queue = session.start()
    call = session.next(queue, approving=False)
    assert type(call) is CallModel and queue == []
    parts = [ToolCall("w", "wire", {"amount": 5}), ToolCall("c", "weather", {"city": "Rome"})]
    reply = ModelResponse(parts, ModelStop.tool_use)
    queue += session.send(ModelReplied(call.id, reply, now=0.0))
    tool_call = session.next(queue, approving=False)
    assert type(tool_call) is RunTool and tool_call.id == "c"
    assert session.recorded == [ToolStarted("c", now=0.0)]  # begun: its start recorded
    assert session.next(queue, approving=False) is None
    assert [c.id for c in session.waiting] == ["w"] and session.finish is None


def test_on_step_sees_a_tool_call_once_its_start_is_recorded() -> None:
    seen: list[str] = []

    def on_step(step: Command | Observation) -> None:
        if type(step) is RunTool:
            events = session.loop.state.events
            assert ToolStarted(step.id, now=0.0) in events
        seen.append(type(step).__name__)

    io = ScriptedIO(scripted([calls("Paris", "Oslo"), text("done")]), [weather])
    session = Session(
        LoopSpec(), "weather?", tool_specs=io.runner.specs, clock=lambda: 0.0, on_step=on_step
    )
    assert io.drive(session).output == "done"
    assert seen.count("RunTool") == 2 and seen.count("ToolReturned") == 2
    assert seen[-1] == "Finish"


def test_a_resumed_clock_goes_on_from_the_last_event_and_never_reads_before_it() -> None:
    io = ScriptedIO(scripted([calls("Paris")]), [weather])
    first = io.session(LoopSpec(), "weather?")
    first.start()
    io.time = 40.0
    resumed = Session(LoopSpec(), loop=first.loop, clock=lambda: 1000.0)
    assert resumed.offset == -1000.0 and resumed.now() == 0.0  # time at rest is not counted
    carried = Session(LoopSpec(), loop=first.loop, clock=lambda: 1000.0, offset=-1010.0)
    assert carried.offset == -1010.0 and carried.now() == 0.0  # not -10: before the last event
    assert type(carried.start()[0]) is CallModel
    assert type(carried.loop.state.events[-1]) is Resumed


def test_the_alarm_is_set_for_the_deadline_and_ticks_only_once_it_passed() -> None:
    spec = LoopSpec(guards=Guards(deadline_s=5.0))
    io = ScriptedIO(scripted([text("done")]))
    session = io.session(spec, "hi")
    session.start()
    assert session.alarm(0.001) == 5.0 and not session.alarm_moved()
    io.time = 4.9999
    assert session.tick() is None  # woken early (a clock's rounding): no Tick
    assert session.alarm(0.001) == 0.001  # and never a busy loop
    io.time = 5.0
    assert session.tick() == Tick(now=5.0)


def test_the_alarm_moves_while_only_a_person_is_awaited() -> None:
    spec = LoopSpec(
        tools=(msgspec.structs.replace(weather.spec, needs_approval=True),),
        guards=Guards(deadline_s=5.0),
    )
    io = ScriptedIO(scripted([calls("Paris")]), [weather])
    session = io.session(spec, "weather?")
    [call] = session.start()
    assert session.alarm(0.0) == 5.0
    session.send(ModelReplied(call.id, calls("Paris"), now=1.0))
    assert session.alarm_moved() and session.alarm(0.0) is None  # a person's time is not counted


@pytest.mark.parametrize("log", [True, False])
def test_log_false_keeps_a_run_out_of_the_log(log: bool, caplog: pytest.LogCaptureFixture) -> None:
    io = ScriptedIO(scripted([text("done")]))
    with caplog.at_level(logging.INFO, logger="turnstile.run"):
        io.drive(Session(LoopSpec(), "hi", clock=lambda: 0.0, log=log))
    assert bool([r for r in caplog.records if r.name == "turnstile.run"]) is log


@pytest.mark.parametrize("driver", ["sync", "aio", "temporal"])
def test_every_driver_tells_the_loop_only_through_its_session(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No executor sends to the loop, or starts it, itself: the protocol is the Session's."""
    callers: set[str] = set()

    def spied(method: Callable[..., Any]) -> Callable[..., Any]:
        def spy(loop: Loop, *args: Any, **kwargs: Any) -> Any:
            callers.add(sys._getframe(1).f_globals["__name__"])
            return method(loop, *args, **kwargs)

        return spy

    monkeypatch.setattr(Loop, "send", spied(Loop.send))
    monkeypatch.setattr(Loop, "start", spied(Loop.start))
    model = ScriptedModel([calls("Paris", "Oslo"), text("done")])
    if driver == "sync":
        sync.run(LoopSpec(), "weather?", model=model, tools=[weather])
    elif driver == "aio":
        from turnstile.executors import aio
        from turnstile.executors.testing import run_async

        run_async(lambda: aio.run(LoopSpec(), "weather?", model=model, tools=[weather]))
    else:
        pytest.importorskip("temporalio", reason="needs temporalio")
        from temporalio.client import WorkflowHistory

        from tests.executors.temporal_kit import HISTORIES, replay

        path = HISTORIES / "anthropic-weather.json"
        replay(WorkflowHistory.from_json(path.stem, path.read_text()))
    assert callers == {"turnstile.executors._session"}
