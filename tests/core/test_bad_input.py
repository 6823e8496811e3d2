"""Bad input never corrupts a run: the caller's mistakes are typed errors that change nothing;
the model's and the tools' mistakes are something the loop carries on with."""

from __future__ import annotations

import json
import math
import zlib
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
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    ProtocolError,
    RunTool,
    StopReason,
    Tick,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Opaque,
    Text,
    ToolCall,
    ToolResults,
    UserMessage,
    validate_history,
)

from tests.core._drive import Driver, call, reply, spec

SPEC = spec("t")


def one_call_running() -> Driver:
    d = Driver(SPEC)
    d.start()
    d.reply(call("c1", "t", n=1))
    return d


def refused(d: Driver, obs: Any, error: type[Exception] = InvalidObservation) -> Exception:
    before = d.loop.dump()
    with pytest.raises(error) as raised:
        d.loop.send(obs)
    assert d.loop.dump() == before, "a refused observation changed the state"
    return raised.value


# -- 1. wrong types are refused before anything changes ------------------------------------------


@pytest.mark.parametrize(
    ("obs", "where"),
    [
        (ToolReturned("c1", {"result": 1}, now=2.0), "content"),  # type: ignore[arg-type]
        (ToolReturned("c1", "ok", "yes", now=2.0), "is_error"),  # type: ignore[arg-type]
        (ToolReturned(7, "ok", now=2.0), "call_id"),  # type: ignore[arg-type]
        (ToolReturned("c1", "ok", now="2"), "now"),  # type: ignore[arg-type]
    ],
)
def test_a_tool_result_of_the_wrong_type_is_refused_and_the_call_still_waits(
    obs: ToolReturned, where: str
) -> None:
    d = one_call_running()
    error = refused(d, obs)
    assert isinstance(error, ProtocolError) and where in error.path  # type: ignore[attr-defined]
    [ask] = d.result("c1", "fine")  # the right answer still goes through
    assert type(ask) is CallModel
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


@pytest.mark.parametrize(
    "response",
    [
        ModelResponse("just a string", ModelStop.end_turn),  # type: ignore[arg-type]
        ModelResponse([{"type": "text", "text": "hi"}], ModelStop.end_turn),  # type: ignore[list-item]
        ModelResponse([Text(3)], ModelStop.end_turn),  # type: ignore[arg-type]
        ModelResponse([Text("hi")], "end_turn?"),  # type: ignore[arg-type]
        ModelResponse([ToolCall("c", "t", ["not", "an", "object"])], ModelStop.tool_use),  # type: ignore[arg-type]
        {"content": [], "stop": "end_turn"},
        None,
    ],
)
def test_a_reply_of_the_wrong_type_is_refused(response: Any) -> None:
    d = Driver(SPEC)
    d.start()
    refused(d, ModelReplied(d.pending_model(), response, now=1.0))


def test_a_value_that_is_not_an_observation_is_refused() -> None:
    d = one_call_running()
    obs = {"type": "tool_returned", "call_id": "c1", "content": "x", "now": 2.0}
    refused(d, obs, ProtocolError)


def test_the_state_holds_its_own_copy_of_what_it_was_sent() -> None:
    d = Driver(SPEC)
    d.start()
    arguments = {"n": 1}
    d.reply(ToolCall("c1", "t", arguments))
    arguments["n"] = 2  # the caller changes its object afterwards
    [ask] = d.result("c1")
    assert ask.request.messages[1].content[0].arguments == {"n": 1}


# -- 2. lone surrogates: text is data, repaired, never a crash ------------------------------------


def test_a_tool_result_with_lone_surrogates_is_repaired_and_the_run_goes_on() -> None:
    d = one_call_running()
    [ask] = d.result("c1", "report.txt\nr\udce9sum\udce9.txt")
    [result] = ask.request.messages[-1].results
    assert "\udce9" not in result.content and "r\ufffdsum\ufffd.txt" in result.content
    assert "not valid Unicode" in result.content  # the model is told why
    json.dumps(result.content, ensure_ascii=False).encode()
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


def test_reply_text_with_a_lone_surrogate_is_repaired_so_the_next_request_encodes() -> None:
    d = Driver(SPEC)
    d.start()
    [done] = d.reply("half a smile \ud83d and a whole one \ud83d\ude00")
    assert done.output == "half a smile \ufffd and a whole one 😀"
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


def test_a_call_whose_arguments_hold_lone_surrogates_is_not_run() -> None:
    d = Driver(SPEC)
    d.start()
    [ask] = d.reply(ToolCall("c1", "t", {"path": "a\ud83d"}))
    assert type(ask) is CallModel  # nothing ran: the model gets an error result instead
    [result] = ask.request.messages[-1].results
    assert result.is_error and "not valid JSON" in result.content
    validate_history(ask.request.messages)


def test_a_prompt_with_a_lone_surrogate_starts_a_valid_run() -> None:
    loop = Loop(SPEC)
    [ask] = loop.start("x\udcff", 0.0)
    assert ask.request.messages[0] == UserMessage("x\ufffd")
    assert Loop.load(SPEC, loop.dump()).state == loop.state


def test_a_failed_start_leaves_the_loop_as_it_was() -> None:
    loop = Loop(SPEC)
    with pytest.raises(ProtocolError):
        loop.start([UserMessage("hi"), "not a message"], 0.0)  # type: ignore[list-item]
    [ask] = loop.start("hi", 0.0)
    assert list(ask.request.messages) == [UserMessage("hi")]


# -- 3. numbers that are not finite --------------------------------------------------------------


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_a_time_that_is_not_finite_is_refused(now: float) -> None:
    d = one_call_running()
    error = refused(d, ToolReturned("c1", "ok", now=now))
    assert error.path == "now"  # type: ignore[attr-defined]


def test_time_going_backwards_is_refused() -> None:
    d = one_call_running()
    error = refused(d, ToolReturned("c1", "ok", now=0.5))
    assert "before" in str(error)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_call_with_a_non_finite_number_in_its_arguments_is_not_run(bad: float) -> None:
    d = Driver(SPEC)
    d.start()
    [ask] = d.reply(ToolCall("c1", "t", {"x": [1, bad]}))
    assert type(ask) is CallModel
    [result] = ask.request.messages[-1].results
    assert result.is_error
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


def test_a_retry_after_that_is_not_finite_is_refused() -> None:
    d = Driver(SPEC)
    d.start()
    refused(d, ModelFailed(d.pending_model(), "busy", True, retry_after=math.nan, now=1.0))


# -- 4. Loop.load checks what it reads -----------------------------------------------------------


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


# -- 5. duplicate call ids from the model --------------------------------------------------------


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


# -- 10. time spent waiting only for a human is not the run's time -------------------------------


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


# -- 13. retries back off, honouring retry-after -------------------------------------------------


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


# -- 14. a finished conversation goes on with a new user message ---------------------------------


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


# -- 9. a reply waiting for an answer the loop cannot give ends the run, by name -----------------


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


# -- 6. depth bombs and huge inputs --------------------------------------------------------------


def deep(kind: type, levels: int = 3000) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value] if kind is list else {"a": value}
    return value


def _forged(state: bytes) -> bytes:
    """A dump of `state` under a checksum made to match, as damage could never make it."""
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(state), state)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 3000,
        b'{"a":' * 3000,
        b"[" * 3000 + b"]" * 3000,
        b'{"schema":2,"state":' + b'{"a":' * 3000,
        _forged(b'{"phase":' + b"[" * 3000 + b"1" + b"]" * 3000 + b"}"),
        "[" * 3000,
    ],
)
def test_a_dump_nested_thousands_deep_is_corrupt_state(data: bytes | str) -> None:
    with pytest.raises(CorruptState):
        Loop.load(SPEC, data)


def test_tool_arguments_nested_thousands_deep_in_a_dump_are_corrupt_state() -> None:
    d = one_call_running()
    state = json.loads(d.loop.dump())["state"]
    text = json.dumps(state).replace('{"n": 1}', '{"n": ' + "[" * 600 + "]" * 600 + "}")
    assert text != json.dumps(state)
    with pytest.raises(CorruptState, match="nested deeper"):
        Loop.load(SPEC, _forged(text.encode()))


def test_ten_megabytes_of_json_that_is_no_dump_is_corrupt_state() -> None:
    with pytest.raises(CorruptState):
        Loop.load(SPEC, b"[" + b"1," * 5_000_000 + b"1]")
    with pytest.raises(CorruptState):
        Loop.load(SPEC, b'{"schema":2,"state":"' + b"x" * 10_000_000 + b'"}')


def test_a_run_holding_ten_megabytes_dumps_and_loads() -> None:
    d = one_call_running()
    d.loop.send(ToolReturned("c1", "x" * 10_000_000, now=2.0))
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


@pytest.mark.parametrize("levels", [3000, 600, 200])
@pytest.mark.parametrize("kind", [list, dict])
def test_a_call_whose_arguments_nest_too_deep_is_not_run_and_the_run_goes_on(
    kind: type, levels: int
) -> None:
    d = Driver(SPEC)
    d.start()
    bomb = reply(ToolCall("c1", "t", {"x": deep(kind, levels)}))
    [ask] = d.loop.send(ModelReplied(d.pending_model(), bomb, now=1.0))
    assert type(ask) is CallModel  # nothing ran: the model gets an error result instead
    [result] = ask.request.messages[-1].results
    assert result.is_error
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


def test_arguments_as_deep_as_a_model_may_send_are_run_and_the_run_loads() -> None:
    d = Driver(SPEC)
    d.start()
    [run] = d.reply(ToolCall("c1", "t", {"x": deep(list, 99)}))
    assert type(run) is RunTool
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


class Answer(msgspec.Struct):
    x: int


def test_a_native_answer_nested_thousands_deep_goes_back_to_the_model() -> None:
    d = Driver(spec(output=Answer, output_mode="native"))
    d.start()
    [ask] = d.reply("[" * 3000 + "]" * 3000)
    assert type(ask) is CallModel
    assert "the answer is not JSON" in d.state.messages[-1].content
    assert Loop.load(d.loop.spec, d.loop.dump()).state == d.state


@pytest.mark.parametrize(
    "part", [Text("hi", provider_data=deep(dict)), Opaque("anthropic", deep(dict))]
)
def test_a_reply_nested_thousands_deep_elsewhere_is_refused(part: Any) -> None:
    d = Driver(SPEC)
    d.start()
    before = d.loop.dump()
    with pytest.raises(InvalidObservation, match="nested deeper"):
        d.loop.send(ModelReplied(d.pending_model(), reply(part), now=1.0))
    assert d.loop.dump() == before


def test_a_start_with_a_tool_schema_nested_thousands_deep_is_refused() -> None:
    loop = Loop(LoopSpec())
    with pytest.raises(InvalidObservation, match="nested deeper"):
        loop.start("hi", 0.0, tools=(ToolSpec("x", parameters={"a": deep(dict)}),))
    loop.start("hi", 0.0)
