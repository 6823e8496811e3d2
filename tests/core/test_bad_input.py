"""Input the loop did not ask for never corrupts a run: a damaged dump is `CorruptState`
naming what is wrong; a reply reusing a call id, asking for an action the loop cannot take, or
an answer nested thousands deep is answered and the run goes on; time spent waiting only for
a human is not the run's; retries wait what the provider asked. (What the boundary refuses or
repairs is tested in test_boundary, what decoding bounds in test_decoding.)"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    Approved,
    CallModel,
    CorruptState,
    Denied,
    Finish,
    Guards,
    Loop,
    ModelFailed,
    ModelReplied,
    RunTool,
    StopReason,
    Tick,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
    UserMessage,
    validate_history,
)

from tests.core._drive import SPEC, Driver, call, one_call_running, reply, spec

# -- Loop.load checks what it reads --------------------------------------------------------------


def test_a_dump_carries_a_checksum_and_any_change_is_corrupt_state() -> None:
    d = one_call_running()
    data = d.loop.dump()
    assert json.loads(data)["checksum"]
    changed = data.replace(b'"turns":1', b'"turns":2')
    assert changed != data
    with pytest.raises(CorruptState, match="checksum"):
        Loop.load(SPEC, changed)


def _without_checksum(state: dict[str, Any]) -> bytes:
    """A schema-1 dump (before checksums) of `state`, to test the consistency checks alone."""
    return json.dumps({"schema": 1, "state": state}).encode()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"started_at": None}, "started_at"),
        ({"pending_model": None}, "no model call"),
        ({"phase": "done"}, "stop reason"),
        ({"phase": "awaiting_tools"}, "model call"),
        ({"events": []}, "event"),
        ({"batch": []}, "no call"),
        ({"messages": []}, "conversation is empty"),  # found by bench.fuzz_load
    ],
)
def test_a_dump_inconsistent_with_itself_is_corrupt_state_naming_what(
    change: dict[str, Any], reason: str
) -> None:
    d = Driver(SPEC)
    d.start()
    state = json.loads(d.loop.dump())["state"]
    if "batch" in change:  # a reply whose call is in flight, with its round emptied
        d.reply(call("c1", "t"))
        state = json.loads(d.loop.dump())["state"]
    state |= change
    with pytest.raises(CorruptState, match=reason):
        Loop.load(SPEC, _without_checksum(state))


def test_every_loaded_state_has_something_to_wait_for_or_is_done() -> None:
    d = one_call_running()
    state = json.loads(d.loop.dump())["state"]
    state["batch"][0]["status"] = "done"  # running no more, yet no result
    with pytest.raises(CorruptState):
        Loop.load(SPEC, _without_checksum(state))


# -- duplicate call ids from the model -----------------------------------------------------------


def test_a_reply_reusing_a_call_id_gets_an_error_result_for_the_repeat() -> None:
    d = Driver(SPEC)
    d.start()
    commands = d.reply(call("a", "t", n=1), call("a", "t", n=2))
    [run] = commands
    assert type(run) is RunTool and run.arguments == {"n": 1}
    [ask] = d.result("a")
    validate_history(ask.request.messages)
    first, second = ask.request.messages[-1].results
    assert (first.call_id, first.is_error) == ("a", False)
    assert second.call_id != "a" and second.is_error and "id 'a'" in second.content


# -- time spent waiting only for a human is not the run's time -----------------------------------


def test_waiting_for_an_approval_does_not_spend_the_deadline() -> None:
    d = Driver(spec(ToolSpec("write", needs_approval=True), guards=Guards(deadline_s=60.0)))
    d.start()
    [ask] = d.reply(call("w", "write"), dt=10.0)
    assert d.loop.next_deadline() is None  # nothing but a human to wait for
    d.now += 700.0
    [run] = d.send(Approved("w", now=d.now))
    assert type(run) is RunTool
    assert d.loop.next_deadline() == pytest.approx(d.now + 50.0)
    [ask] = d.result("w", dt=1.0)
    assert type(ask) is CallModel


def test_deadline_passed_says_when_a_tick_would_stop_the_run() -> None:
    d = Driver(spec(ToolSpec("write", needs_approval=True), guards=Guards(deadline_s=60.0)))
    d.start()
    deadline = d.loop.next_deadline()
    assert deadline is not None
    assert not d.loop.deadline_passed(deadline - 1e-6) and d.loop.deadline_passed(deadline)
    d.reply(call("w", "write"))
    assert not d.loop.deadline_passed(deadline + 1000.0)  # only a human is awaited
    d.send(Denied("w", now=d.now + 1000.0))
    assert d.loop.deadline_passed(d.loop.next_deadline())
    [ask] = d.send(Tick(now=d.loop.next_deadline()))  # the deadline: one last call, to sum up
    assert type(ask) is CallModel and ask.request.purpose == "finalize"
    assert not d.loop.deadline_passed(d.now + 1e9)  # finalizing: no deadline left to pass


def test_a_tick_while_only_a_human_is_awaited_does_not_end_the_run() -> None:
    d = Driver(spec(ToolSpec("write", needs_approval=True), guards=Guards(deadline_s=60.0)))
    d.start()
    d.reply(call("w", "write"))
    assert d.send(Tick(now=1000.0)) == []


# -- retries back off, honouring retry-after -----------------------------------------------------


def test_a_retry_waits_at_least_what_the_provider_asked() -> None:
    d = Driver(SPEC)
    d.start()
    [retry] = d.send(ModelFailed(d.pending_model(), "429", True, retry_after=7.5, now=1.0))
    assert type(retry) is CallModel and retry.not_before is not None
    assert retry.not_before >= 1.0 + 7.5
    assert d.loop.outstanding_commands() == [retry]  # a resumed executor waits the same


def test_retries_back_off_exponentially_with_jitter_decided_by_the_log() -> None:
    def waits() -> list[float]:
        d = Driver(spec("t", guards=Guards(max_model_retries=4)))
        d.start()
        out = []
        for _ in range(4):
            [retry] = d.send(ModelFailed(d.pending_model(), "busy", True, now=d.now))
            out.append(retry.not_before - d.now)
            d.now = retry.not_before
        return out

    first, again = waits(), waits()
    assert first == again  # a replay decides the same
    base = Guards().retry_backoff_s
    for n, wait in enumerate(first):
        assert base * 2**n / 2 <= wait <= base * 2**n


def test_a_retry_that_would_wait_past_the_deadline_stops_instead() -> None:
    d = Driver(spec("t", guards=Guards(deadline_s=10.0)))
    d.start()
    [done] = d.send(ModelFailed(d.pending_model(), "429", True, retry_after=60.0, now=1.0))
    assert done == Finish(StopReason.deadline)


# -- a finished conversation goes on with a new user message -------------------------------------


def test_a_finished_loop_started_again_continues_the_conversation() -> None:
    d = Driver(SPEC)
    d.start("first")
    d.reply(call("c1", "t"))
    d.result("c1")
    d.reply("answer one")
    assert d.state.phase == "done"
    [ask] = d.loop.start("second", d.now + 1.0)
    assert [type(m) for m in ask.request.messages][-2:] == [AssistantMessage, UserMessage]
    assert ask.request.messages[-1] == UserMessage("second")
    assert d.state.turns == 0 and d.state.stop_reason is StopReason.unknown
    [done] = d.loop.send(ModelReplied(ask.id, reply("answer two"), now=d.now + 2.0))
    assert done == Finish(StopReason.completed, "answer two")
    replayed = Loop.replay(SPEC, d.state.events)
    assert replayed.state == d.state
    assert len([m for m in d.state.messages if type(m) is ToolResults]) == 1


# -- a reply waiting for an answer the loop cannot give ends the run, by name --------------------


def test_a_reply_that_requires_an_action_the_loop_cannot_take_stops_by_name() -> None:
    d = Driver(SPEC)
    d.start()
    response = ModelResponse(
        [Text("approve this?"), ToolCall("c1", "t", {})],
        ModelStop.requires_action,
        raw_stop="mcp_approval_request",
    )
    [done] = d.send(ModelReplied(d.pending_model(), response, now=1.0))
    assert done == Finish(StopReason.requires_action, "approve this?")
    [result] = d.state.messages[-1].results
    assert result.is_error and "not run" in result.content
    validate_history(d.state.messages)


# -- an answer nested thousands deep -------------------------------------------------------------


class Answer(msgspec.Struct):
    x: int


def test_a_native_answer_nested_thousands_deep_goes_back_to_the_model() -> None:
    d = Driver(spec(output=Answer, output_mode="native"))
    d.start()
    [ask] = d.reply("[" * 3000 + "]" * 3000)
    assert type(ask) is CallModel
    assert "the answer is not JSON" in d.state.messages[-1].content
    assert Loop.load(d.loop.spec, d.loop.dump()).state == d.state
