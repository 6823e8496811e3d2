"""What comes into the loop is checked before anything changes: the caller's mistakes (a field of
the wrong type, a time that is not finite or goes back) are `InvalidObservation` naming the
field, and leave the state as it was; what a model or a tool said (text that is not valid
Unicode, arguments that cannot be written down) is repaired or answered, and the run goes on."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from turnstile.core import (
    Approved,
    CallModel,
    Cancelled,
    Denied,
    InvalidHistory,
    InvalidObservation,
    Loop,
    LoopSpec,
    LoopState,
    ModelFailed,
    ModelReplied,
    ProtocolError,
    Resumed,
    RunTool,
    Tick,
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Opaque,
    Text,
    ToolCall,
    Usage,
    UserMessage,
    validate_history,
)

from tests.core._drive import SPEC, Driver, call, deep, one_call_running, reply


def refused(d: Driver, obs: Any, error: type[Exception] = InvalidObservation) -> Exception:
    before = d.loop.dump()
    with pytest.raises(error) as raised:
        d.loop.send(obs)
    assert d.loop.dump() == before, "a refused observation changed the state"
    return raised.value


# -- wrong types are refused before anything changes ---------------------------------------------


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


@pytest.mark.parametrize(
    ("response", "path"),
    [
        (ModelResponse([Text(3)], ModelStop.end_turn), "response.content[0].text"),  # type: ignore[arg-type]
        (
            ModelResponse([Text("hi")], ModelStop.end_turn, Usage(1.5, 1)),  # type: ignore[arg-type]
            "response.usage.input_tokens",
        ),
        (
            ModelResponse([Text("hi", provider_data={"score": math.inf})], ModelStop.end_turn),
            "response.content[0].provider_data.score",
        ),
    ],
)
def test_a_wrong_value_deep_in_a_reply_is_refused_naming_its_path(
    response: ModelResponse, path: str
) -> None:
    d = Driver(SPEC)
    d.start()
    error = refused(d, ModelReplied(d.pending_model(), response, now=1.0))
    assert error.path == path and str(error).startswith(path + ": ")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "obs",
    [
        Tick(now=math.nan),
        Resumed(now=math.inf),
        ToolStarted("c1", now=math.nan),
        Approved("c1", now=math.nan),
        Denied("c1", "no", now=-math.inf),
        Cancelled("stop", now=math.nan),
    ],
    ids=lambda obs: type(obs).__name__,
)
def test_every_kind_of_observation_with_a_time_that_is_not_finite_is_refused(obs: Any) -> None:
    error = refused(one_call_running(), obs)
    assert error.path == "now"  # type: ignore[attr-defined]


def test_a_time_equal_to_the_last_event_s_is_accepted() -> None:
    d = one_call_running()
    [ask] = d.send(ToolReturned("c1", "at once", now=d.now))
    assert type(ask) is CallModel


# -- lone surrogates: text is data, repaired, never a crash --------------------------------------


def test_a_tool_result_with_lone_surrogates_is_repaired_and_the_run_goes_on() -> None:
    d = one_call_running()
    [ask] = d.result("c1", "report.txt\nr\udce9sum\udce9.txt")
    [result] = ask.request.messages[-1].results
    assert "\udce9" not in result.content and "r\ufffdsum\ufffd.txt" in result.content
    assert "not valid Unicode" in result.content  # the model is told why
    json.dumps(result.content, ensure_ascii=False).encode()
    assert Loop.load(SPEC, d.loop.dump()).state == d.state


def test_a_tool_result_s_text_parts_are_repaired_and_the_model_told_why_in_a_part() -> None:
    d = one_call_running()
    [ask] = d.result("c1", [Text("r\udce9sum\udce9.txt")])
    [result] = ask.request.messages[-1].results
    repaired, why = result.content
    assert repaired == Text("r\ufffdsum\ufffd.txt")
    assert type(why) is Text and "not valid Unicode" in why.text
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


# -- numbers that are not finite -----------------------------------------------------------------


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


# -- values nested too deep ----------------------------------------------------------------------


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


# -- what a run starts from -------------------------------------------------------------------


def test_a_start_ending_on_text_the_model_wrote_is_a_prefill_it_goes_on_from() -> None:
    loop = Loop(SPEC)
    prefill = [UserMessage("JSON please"), AssistantMessage([Text('{"city": "')])]
    [ask] = loop.start(prefill, 0.0)
    assert list(ask.request.messages) == prefill


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [
        ([], "no messages to start from"),
        ([UserMessage("q"), AssistantMessage([call("a", "t")])], "ends with the model's reply"),
    ],
)
def test_a_start_from_nothing_or_from_a_reply_calling_tools_is_an_invalid_history(
    prompt: list[Any], problem: str
) -> None:
    loop = Loop(SPEC)
    with pytest.raises(InvalidHistory, match=problem):
        loop.start(prompt, 0.0)
    assert loop.state == LoopState()


def test_a_start_from_neither_text_nor_messages_is_refused() -> None:
    loop = Loop(SPEC)
    with pytest.raises(InvalidObservation, match="expected a str or a list of messages"):
        loop.start(42, 0.0)  # type: ignore[arg-type]
    assert loop.state == LoopState()
