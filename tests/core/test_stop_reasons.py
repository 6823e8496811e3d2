"""One scenario per stop reason, each snapshotted as its steps and its transcript."""

from __future__ import annotations

from turnstile.core import (
    Approved,
    Cancelled,
    Denied,
    Guards,
    ModelFailed,
    StopReason,
    Tick,
    ToolSpec,
)
from turnstile.core.conditions import HasToolCall, TextContains, TurnCountIs
from turnstile.core.messages import ModelStop, ToolCall, Usage, validate_history

from tests.core._drive import Driver, call, spec


def finished(d: Driver, reason: StopReason) -> None:
    assert d.last[-1].reason is reason
    assert d.state.stop_reason is reason and d.state.phase == "done"
    validate_history(d.state.messages)


def test_completed(snapshot) -> None:
    d = Driver(spec("get_weather"))
    d.start("北京和上海哪个更暖和?")
    d.reply("查询中", call("a", "get_weather", city="北京"), call("b", "get_weather", city="上海"))
    d.result("b", '{"温度":29}')
    d.result("a", '{"温度":26}')
    d.reply("上海更暖和")
    finished(d, StopReason.completed)
    assert d.last[-1].output == "上海更暖和"
    assert d.transcript() == snapshot


def test_finish_tool_output_is_its_arguments(snapshot) -> None:
    d = Driver(spec("search", ToolSpec("answer", finish=True)))
    d.start()
    d.reply(call("s", "search", q="x"))
    d.result("s", "found")
    d.reply(call("f", "answer", text="42", sources=["s"]))
    finished(d, StopReason.finish_tool)
    assert d.last[-1].output == {"text": "42", "sources": ["s"]}
    assert d.transcript() == snapshot


def test_finish_tool_waits_for_the_rest_of_its_batch() -> None:
    d = Driver(spec("write", ToolSpec("done", finish=True)))
    d.start()
    assert [c.id for c in d.reply(call("w", "write"), call("f", "done"))] == ["w"]
    [finish] = d.result("w")
    assert finish.reason is StopReason.finish_tool


def test_stop_conditions(snapshot) -> None:
    d = Driver(spec("t", stop_when=(HasToolCall("t"),)))
    d.start()
    d.reply(call("a", "t"))
    d.result("a")
    finished(d, StopReason.stop_condition)
    assert d.last[-1].output is None
    assert d.transcript() == snapshot

    d = Driver(spec("t", stop_when=(TurnCountIs(2),)))
    d.start()
    d.reply(call("a", "t", n=1))
    d.result("a")
    d.reply(call("b", "t", n=2))
    d.result("b")
    finished(d, StopReason.stop_condition)
    assert d.state.turns == 2

    d = Driver(spec("t", stop_when=(TextContains("DONE"),)))
    d.start()
    d.reply("almost DONE", call("a", "t"))
    d.result("a")
    finished(d, StopReason.stop_condition)

    d = Driver(spec("t", stop_when=(lambda state: state.usage.output_tokens >= 10,)))
    d.start()
    d.reply(call("a", "t"), usage=Usage(1, 10))
    d.result("a")
    finished(d, StopReason.stop_condition)


def test_max_turns_finalizes_without_tools(snapshot) -> None:
    d = Driver(spec("t", guards=Guards(max_turns=2)))
    d.start()
    d.reply(call("a", "t", n=1))
    d.result("a")
    d.reply(call("b", "t", n=2))
    [final] = d.result("b")
    assert final.request.purpose == "finalize" and final.request.tools == ()
    assert "final answer" in final.request.messages[-1].content
    [finish] = d.reply("best answer so far")
    assert finish.output == "best answer so far"
    finished(d, StopReason.max_turns)
    assert d.state.turns == 2
    assert d.transcript() == snapshot


def test_max_turns_without_finalization() -> None:
    d = Driver(spec("t", guards=Guards(max_turns=1, finalize=False)))
    d.start()
    d.reply(call("a", "t"))
    [finish] = d.result("a")
    assert finish.output is None
    finished(d, StopReason.max_turns)


def test_deadline_mid_batch_writes_results_first(snapshot) -> None:
    d = Driver(spec("slow", "fast", guards=Guards(deadline_s=10.0)))
    d.start()
    d.reply(call("s", "slow"), call("f", "fast"))
    d.result("f", "quick")
    d.now = 11.0
    [final] = d.send(Tick(now=d.now))
    results = final.request.messages[-2].results
    assert [r.call_id for r in results] == ["s", "f"]
    assert results[0].is_error
    assert results[0].content == "no result: the run's deadline passed before this call returned"
    assert not results[1].is_error
    d.reply("partial answer")
    finished(d, StopReason.deadline)
    assert d.last[-1].output == "partial answer"
    assert d.transcript() == snapshot


def test_deadline_while_waiting_for_the_model() -> None:
    d = Driver(spec(guards=Guards(deadline_s=5.0, finalize=False)))
    d.start()
    assert d.send(Tick(now=4.0)) == []
    d.send(Tick(now=5.0))
    finished(d, StopReason.deadline)


def test_context_budget_keeps_the_reserve_free(snapshot) -> None:
    guards = Guards(context_window=128_000, reserve_tokens=18_000)
    d = Driver(spec("read", guards=guards))
    d.start()
    d.reply(call("a", "read", n=1), usage=Usage(100_000, 1_000))
    [ask] = d.result("a", "short")  # 101k + a few tokens: still below 110k
    assert ask.request.purpose == "turn"
    d.reply(call("b", "read", n=2), usage=Usage(109_900, 90))
    [final] = d.result("b", "x" * 60)  # 109,990 + 20 estimated > 110k: finalize now
    assert final.request.purpose == "finalize"
    d.reply("summary")
    finished(d, StopReason.context_budget)
    assert d.last[-1].output == "summary" and d.state.turns == 2
    assert d.transcript() == snapshot


def test_repeated_call(snapshot) -> None:
    d = Driver(spec("ping", guards=Guards(max_repeated_calls=3, max_stalled_rounds=None)))
    d.start()
    for i in range(2):
        d.reply(call(f"c{i}", "ping", host="a"))
        d.result(f"c{i}", f"reply {i}")
    d.reply(call("c2", "ping", host="a"))
    finished(d, StopReason.repeated_call)
    last = d.state.messages[-1].results[0]
    assert last.is_error and "already called 2 times" in last.content
    assert d.last[-1].output is None and d.state.turns == 3
    assert d.transcript() == snapshot


def test_no_progress_on_identical_rounds_and_on_cycles() -> None:
    guards = Guards(max_stalled_rounds=3, max_repeated_calls=None)
    d = Driver(spec("look", guards=guards))
    d.start()
    for i in range(3):
        d.reply(call(f"c{i}", "look", at="x"))
        d.result(f"c{i}", "nothing")
    finished(d, StopReason.no_progress)

    d = Driver(spec("a", "b", guards=Guards(max_stalled_rounds=2, max_repeated_calls=None)))
    d.start()
    for i in range(4):
        name = "ab"[i % 2]
        d.reply(call(f"c{i}", name))
        d.result(f"c{i}", f"{name} says hi")
    finished(d, StopReason.no_progress)


def test_tool_errors(snapshot) -> None:
    d = Driver(spec("flaky", guards=Guards(max_failed_rounds=2)))
    d.start()
    d.reply(call("a", "flaky", n=1))
    d.result("a", "boom", is_error=True)
    d.reply(call("b", "flaky", n=2))
    d.result("b", "boom again", is_error=True)
    finished(d, StopReason.tool_errors)
    assert d.last[-1].output is None and d.state.turns == 2
    assert d.transcript() == snapshot


def test_one_success_resets_the_failed_rounds() -> None:
    d = Driver(spec("flaky", guards=Guards(max_failed_rounds=2)))
    d.start()
    for i, ok in enumerate([False, True, False]):
        d.reply(call(f"c{i}", "flaky", n=i))
        [ask] = d.result(f"c{i}", "x", is_error=not ok)
        assert ask.request.purpose == "turn"


def test_model_error_after_retries(snapshot) -> None:
    d = Driver(spec(guards=Guards(max_model_retries=2)))
    d.start()
    for _ in range(2):
        [retry] = d.send(ModelFailed(d.pending_model(), "overloaded", True, now=d.now))
        assert retry.request.purpose == "turn"
    d.send(ModelFailed(d.pending_model(), "overloaded", True, now=d.now))
    finished(d, StopReason.model_error)
    assert d.state.turns == 0 and d.state.model_calls == 3
    assert d.last[-1].output is None
    assert d.transcript() == snapshot


def test_a_non_retryable_failure_ends_at_once() -> None:
    d = Driver(spec())
    d.start()
    d.send(ModelFailed(d.pending_model(), "401 invalid key", False, now=1.0))
    finished(d, StopReason.model_error)


def test_max_tokens_text_keeps_its_partial_text(snapshot) -> None:
    d = Driver(spec())
    d.start()
    [finish] = d.reply("The answer is, in sho", stop=ModelStop.max_tokens)
    assert finish.output == "The answer is, in sho"
    finished(d, StopReason.max_tokens)
    assert d.transcript() == snapshot


def test_max_tokens_inside_a_call_asks_again() -> None:
    d = Driver(spec("write"))
    d.start()
    [ask] = d.reply(
        "writing",
        ToolCall("w", "write", {}, raw_arguments='{"text": "lo', complete=False),
        stop=ModelStop.max_tokens,
    )
    assert ask.request.messages[-1].results[0].is_error
    d.reply("ok, shorter")
    finished(d, StopReason.completed)


def test_refusal_and_content_filter(snapshot) -> None:
    d = Driver(spec("t"))
    d.start()
    [finish] = d.reply("I can't help with that.", call("a", "t"), stop=ModelStop.refusal)
    assert finish.output == "I can't help with that."
    finished(d, StopReason.refusal)
    assert d.transcript() == snapshot

    d = Driver(spec())
    d.start()
    d.reply(stop=ModelStop.content_filter)
    finished(d, StopReason.refusal)


def test_cancel_mid_batch(snapshot) -> None:
    d = Driver(spec("a", ToolSpec("b", needs_approval=True)))
    d.start()
    d.reply(call("x", "a"), call("y", "b"))
    d.send(Cancelled("user pressed ctrl-c", now=2.0))
    finished(d, StopReason.cancelled)
    results = d.state.messages[-1].results
    assert [r.content for r in results] == [
        "no result: the run was cancelled (user pressed ctrl-c) before this call returned",
        "not run: the run was cancelled (user pressed ctrl-c)",
    ]
    assert d.last[-1].output is None
    assert d.transcript() == snapshot


def test_denied_call_becomes_an_error_the_model_reads() -> None:
    d = Driver(spec(ToolSpec("rm", needs_approval=True)))
    d.start()
    [ask] = d.reply(call("x", "rm", path="/"))
    assert ask.id == "x"
    [again] = d.send(Denied("x", "too dangerous", now=2.0))
    result = again.request.messages[-1].results[0]
    assert result.is_error and "too dangerous" in result.content
    d.reply("ok, I won't")
    finished(d, StopReason.completed)


def test_requires_action(snapshot) -> None:
    d = Driver(spec("t"))
    d.start()
    [finish] = d.reply("Approve the MCP call?", stop=ModelStop.requires_action)
    assert finish.output == "Approve the MCP call?"
    finished(d, StopReason.requires_action)
    assert d.transcript() == snapshot


def test_every_stop_reason_is_covered() -> None:
    covered = {
        "completed",
        "finish_tool",
        "stop_condition",
        "max_turns",
        "deadline",
        "context_budget",
        "repeated_call",
        "no_progress",
        "tool_errors",
        "model_error",
        "max_tokens",
        "refusal",
        "requires_action",
        "cancelled",
        "invalid_output",  # tests/core/test_output.py
        "cost_budget",  # tests/core/test_cost.py
        "guardrail",  # tests/core/test_checking.py
    }
    assert covered == {r.value for r in StopReason} - {"unknown"}
    assert next(iter(StopReason)) is StopReason.unknown
    assert Approved  # imported for the approval tests' sake
