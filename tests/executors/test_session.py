"""`Session`, the executor protocol without I/O: driven here by a plain-Python driver over
scripted I/O (no threads, no event loop, no Temporal), which the conformance suite runs too."""

from __future__ import annotations

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
    RunTool,
    StopReason,
    Tool,
    ToolReturned,
    ToolStarted,
    tool,
)
from turnstile.core.messages import Message, ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import Journal, Run, ScriptedModel, ToolRunner
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
