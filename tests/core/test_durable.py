"""Intent before effect: an executor says when a call starts; a resumed run re-runs only what is
safe to run twice, tells the model about the rest, and asks again what got no answer."""

from __future__ import annotations

import pytest
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Loop,
    ModelReplied,
    ProtocolError,
    Resumed,
    RunTool,
    ToolContext,
    ToolReturned,
    ToolSpec,
    ToolStarted,
    tool,
)
from turnstile.core.messages import ModelResponse, ModelStop, ToolCall, validate_history
from turnstile.executors import invoke

from tests.core._drive import Driver, call, spec

SPEC = spec(ToolSpec("pay"), ToolSpec("read", replay_safe=True), ToolSpec("ok"))


def resumed(d: Driver) -> tuple[Loop, list]:
    """The loop as a new process finds it (from its dump), told it was resumed."""
    loop = Loop.load(d.loop.spec, d.loop.dump())
    return loop, loop.send(Resumed(now=d.now + 1.0))


def test_a_started_call_is_recorded_and_changes_nothing_else() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("p", "pay"))
    assert d.send(ToolStarted("p", now=d.now)) == []
    assert [p.status.value for p in d.state.round] == ["started"]
    [ask] = d.result("p", "paid")
    assert type(ask) is CallModel


def test_a_call_can_start_only_once_and_only_if_it_was_sent() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("p", "pay"))
    d.send(ToolStarted("p", now=d.now))
    before = d.loop.dump()
    for obs in (ToolStarted("p", now=d.now), ToolStarted("ghost", now=d.now)):
        with pytest.raises(ProtocolError):
            d.loop.send(obs)
    assert d.loop.dump() == before


def test_on_resume_an_interrupted_call_gets_a_result_saying_so_and_is_not_run_again() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("p", "pay", amount=5), call("o", "ok"))
    d.send(ToolStarted("p", now=d.now))
    d.send(ToolStarted("o", now=d.now))
    d.result("o", "fine")
    _, commands = resumed(d)
    [ask] = commands  # nothing runs again: the round is complete
    assert type(ask) is CallModel
    paid, fine = ask.request.messages[-1].results
    assert paid.is_error and "interrupted" in paid.content and "may or may not" in paid.content
    assert (fine.content, fine.is_error) == ("fine", False)
    validate_history(ask.request.messages)


def test_on_resume_a_replay_safe_call_runs_again_and_a_call_never_started_simply_runs() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("r", "read"), call("o", "ok"))
    d.send(ToolStarted("r", now=d.now))  # "o" was sent but never started
    loop, commands = resumed(d)
    assert sorted((type(c).__name__, c.id) for c in commands) == [
        ("RunTool", "o"),
        ("RunTool", "r"),
    ]
    loop.send(ToolStarted("r", now=d.now + 2.0))
    assert loop.send(ToolReturned("r", "read", now=d.now + 3.0)) == []
    [ask] = loop.send(ToolReturned("o", "fine", now=d.now + 3.0))
    assert [r.is_error for r in ask.request.messages[-1].results] == [False, False]


def test_on_resume_a_model_call_without_a_reply_is_asked_again() -> None:
    d = Driver(SPEC)
    [ask] = d.start()
    _, commands = resumed(d)
    assert commands == [ask]


def test_on_resume_pending_approvals_are_asked_again() -> None:
    d = Driver(spec(ToolSpec("delete", needs_approval=True)))
    d.start()
    [asked] = d.reply(call("x", "delete"))
    assert type(asked) is AwaitApproval
    _, commands = resumed(d)
    assert commands == [asked]


def test_resumed_is_in_the_log_so_a_replay_decides_the_same() -> None:
    d = Driver(SPEC)
    d.start()
    d.reply(call("p", "pay"))
    d.send(ToolStarted("p", now=d.now))
    loop, _ = resumed(d)
    assert Loop.replay(loop.spec, loop.state.events).dump() == loop.dump()


def test_a_tool_can_ask_for_its_call_id() -> None:
    @tool(replay_safe=True)
    def charge(amount: int, context: ToolContext) -> str:
        """Charge once per call: the call id is the payment's idempotency key."""
        return f"charged {amount} as {context.call_id}"

    assert charge.spec.replay_safe
    assert set(charge.spec.parameters["properties"]) == {"amount"}  # the model never sees it
    outcome = invoke(charge, {"amount": 3}, context=ToolContext(call_id="c7"))
    assert outcome.content == "charged 3 as c7"
    assert invoke(charge, {"amount": 3}).is_error  # it needs a context, and says so
    assert invoke(charge, {"amount": 3, "context": {"call_id": "forged"}}).is_error


def test_a_run_tool_command_is_what_the_executor_marks_started() -> None:
    d = Driver(SPEC)
    d.start()
    [run] = d.reply(call("p", "pay"))
    assert type(run) is RunTool
    assert d.loop.outstanding_ids() == {"p"}
    d.send(ToolStarted("p", now=d.now))
    assert d.loop.outstanding_ids() == {"p"}


def test_crashes_are_not_tool_failures_for_the_failed_rounds_guard() -> None:
    """Three crashes, each interrupting a round of calls that are not replay-safe, leave three
    rounds of error results: the tools did not fail, the process did, and the run goes on."""
    loop = Loop(SPEC)
    [ask] = loop.start("pay three bills", 0.0)
    now = 1.0
    for n in range(4):
        reply = ModelResponse([ToolCall(f"p{n}", "pay", {"n": n})], ModelStop.tool_use)
        [run] = loop.send(ModelReplied(ask.id, reply, now=now))
        loop.send(ToolStarted(run.id, now=now + 0.1))
        loop = Loop.load(SPEC, loop.dump())  # the process dies mid-call
        [ask] = loop.send(Resumed(now=now + 0.2))
        assert type(ask) is CallModel, f"after crash {n + 1}: {ask}"
        now += 1.0
    assert loop.state.failed_rounds == 0
    validate_history(loop.state.messages)
