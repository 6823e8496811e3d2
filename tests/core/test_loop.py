"""The loop's main path: plural turns, scheduling decided by the core, results in call order."""

from __future__ import annotations

import pytest
from turnstile.core import (
    CallModel,
    Finish,
    Loop,
    LoopState,
    ModelReplied,
    ProtocolError,
    RunTool,
    Started,
    StopReason,
    Tick,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import ToolResults, UserMessage

from tests.core._drive import Driver, call, reply, spec


def ids(commands: list) -> list[str]:
    return [c.id for c in commands]


def test_parallel_calls_go_out_at_once_and_results_are_written_in_call_order() -> None:
    d = Driver(spec("get_weather"))
    [ask] = d.start("北京和上海哪个更暖和?")
    assert type(ask) is CallModel and ask.id == "model-1"
    runs = d.reply(call("a", "get_weather", city="北京"), call("b", "get_weather", city="上海"))
    assert [type(c) for c in runs] == [RunTool, RunTool] and ids(runs) == ["a", "b"]
    assert d.result("b", "29") == []  # not yet: "a" is outstanding
    [ask2] = d.result("a", "26")
    results = ask2.request.messages[-1]
    assert type(results) is ToolResults
    assert [r.call_id for r in results.results] == ["a", "b"]
    assert [r.content for r in results.results] == ["26", "29"]
    [finish] = d.reply("上海更暖和")
    assert finish == Finish(StopReason.completed, "上海更暖和")
    assert d.state.turns == 2


def test_not_parallel_safe_calls_overlap_with_nothing_and_run_in_call_order() -> None:
    serial = ToolSpec("write", parallel_safe=False)
    d = Driver(spec("read", serial))
    d.start()
    runs = d.reply(
        call("r1", "read"), call("w1", "write", n=1), call("r2", "read"), call("w2", "write", n=2)
    )
    assert ids(runs) == ["r1"]  # w1 waits for r1; everything after w1 waits for w1
    assert ids(d.result("r1")) == ["w1"]
    assert ids(d.result("w1")) == ["r2"]
    assert ids(d.result("r2")) == ["w2"]
    [ask] = d.result("w2")
    assert [r.call_id for r in ask.request.messages[-1].results] == ["r1", "w1", "r2", "w2"]


def test_same_resource_calls_queue_but_overlap_with_the_rest() -> None:
    db = ToolSpec("query", resource="db")
    d = Driver(spec(db, "fetch"))
    d.start()
    runs = d.reply(
        call("q1", "query", n=1), call("f1", "fetch"), call("q2", "query", n=2), call("f2", "fetch")
    )
    assert ids(runs) == ["q1", "f1", "f2"]
    assert d.result("f2") == []
    assert ids(d.result("q1")) == ["q2"]
    assert d.result("f1") == []
    [ask] = d.result("q2")
    assert type(ask) is CallModel


def test_unknown_tool_invalid_json_and_cut_off_calls_are_answered_without_running() -> None:
    from turnstile.core.messages import ToolCall

    d = Driver(spec("get_weather"))
    d.start()
    commands = d.reply(
        ToolCall("u", "search_web", {"q": "x"}),
        ToolCall("j", "get_weather", {}, raw_arguments='{"city": "北'),
        ToolCall("c", "get_weather", {"city": "上"}, complete=False),
        call("ok", "get_weather", city="上海"),
    )
    assert ids(commands) == ["ok"]
    [ask] = d.result("ok", "29")
    by_id = {r.call_id: r for r in ask.request.messages[-1].results}
    assert by_id["u"].is_error and "unknown tool 'search_web'" in by_id["u"].content
    assert "Available tools: get_weather" in by_id["u"].content
    assert by_id["j"].is_error and "not valid JSON" in by_id["j"].content
    assert by_id["c"].is_error and "max_tokens" in by_id["c"].content
    assert not by_id["ok"].is_error


def test_a_reply_whose_calls_all_fail_to_qualify_goes_straight_back_to_the_model() -> None:
    d = Driver(spec("t"))
    d.start()
    [ask] = d.reply(call("x", "nope"))
    assert type(ask) is CallModel
    assert ask.request.messages[-1].results[0].is_error


@pytest.mark.parametrize(
    "make",
    [
        lambda d: ToolReturned("zzz", "x", now=9.0),  # no such call
        lambda d: ToolReturned("a", "again", now=9.0),  # duplicate result
        lambda d: ModelReplied("model-1", reply("late"), now=9.0),  # nothing asked of the model
        lambda d: ModelReplied("model-9", reply("?"), now=9.0),
    ],
)
def test_refused_observations_leave_the_state_exactly_as_it_was(make) -> None:
    d = Driver(spec("t"))
    d.start()
    d.reply(call("a", "t"), call("b", "t"))
    d.result("a")
    before = d.loop.dump()
    with pytest.raises(ProtocolError):
        d.loop.send(make(d))
    assert d.loop.dump() == before


def test_anything_after_finish_is_a_protocol_error() -> None:
    d = Driver(spec())
    d.start()
    d.reply("done")
    before = d.loop.dump()
    with pytest.raises(ProtocolError, match="phase done"):
        d.loop.send(Tick(now=5.0))
    assert d.loop.dump() == before  # (start() goes on with the conversation: test_bad_input)


def test_the_start_of_a_log_is_recorded_by_start_never_sent() -> None:
    loop = Loop(spec())
    with pytest.raises(ProtocolError, match=r"recorded by start\(\), never sent"):
        loop.send(Started(messages=[UserMessage("hi")], now=0.0))  # type: ignore[arg-type]
    assert loop.state == LoopState()


def test_command_ids_are_deterministic() -> None:
    def run() -> list[str]:
        d = Driver(spec("t"))
        d.start()
        d.reply(call("a", "t"))
        d.result("a")
        d.reply("end")
        return d.log

    assert run() == run()


def test_start_validates_a_given_history() -> None:
    from turnstile.core import InvalidHistory
    from turnstile.core.messages import AssistantMessage, UserMessage

    loop = Loop(spec("t"))
    with pytest.raises(InvalidHistory) as e:
        loop.start([UserMessage("q"), AssistantMessage([call("a", "t")])], 0.0)
    assert "a" in e.value.call_ids
    assert loop.state.phase == "idle" and loop.state.events == []


def test_pause_asks_again_without_a_new_user_message() -> None:
    from turnstile.core.messages import AssistantMessage, ModelStop

    d = Driver(spec())
    d.start()
    [ask] = d.reply("searching…", stop=ModelStop.pause)
    assert type(ask.request.messages[-1]) is AssistantMessage
    [finish] = d.reply("found it")
    assert finish.reason is StopReason.completed and d.state.turns == 2


def test_building_a_loop_builds_no_state_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import transitions

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a Machine was built on the hot path")

    monkeypatch.setattr(transitions.Machine, "__init__", boom)
    d = Driver(spec("t"))
    d.start()
    d.reply(call("a", "t"))
    d.result("a")
    assert d.reply("end")[0].reason is StopReason.completed
