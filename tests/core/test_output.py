"""A typed final answer (`LoopSpec.output`): the model gives it through the `final_answer` tool
or a format's native structured output; a wrong answer goes back to the model as an error it
can read, a bounded number of times; `Finish.output` is the typed value."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from turnstile.core import Guards, InvalidSpec, Loop, LoopSpec, StopReason
from turnstile.core.messages import ToolResults, UserMessage, validate_history
from turnstile.core.request import OutputFormat, UseTool

from tests.core._drive import Driver, call, spec


class Weather(msgspec.Struct):
    city: str
    temp_c: int


def test_a_wrong_answer_is_read_by_the_model_and_the_corrected_one_is_typed(snapshot) -> None:
    d = Driver(spec("get_weather", output=Weather))
    [ask] = d.start("How warm is Beijing?")
    assert [t.name for t in ask.request.tools] == ["get_weather", "final_answer"]
    assert ask.request.tool_choice == "required"  # the answer comes by a tool, or not at all
    answer_tool = ask.request.tools[1]
    assert answer_tool.parameters["required"] == ["city", "temp_c"] and answer_tool.strict
    d.reply(call("a", "final_answer", city="北京", temp_c="hot"))
    [wrong] = d.state.messages[-1].results
    assert wrong.is_error and "Expected `int`, got `str` - at `$.temp_c`" in wrong.content
    [finish] = d.reply(call("b", "final_answer", city="北京", temp_c=26))
    assert finish.reason is StopReason.finish_tool
    assert finish.output == Weather("北京", 26) and type(finish.output) is Weather
    assert d.state.output == {"city": "北京", "temp_c": 26}  # the state keeps plain data
    validate_history(d.state.messages)
    assert d.transcript() == snapshot


def test_a_dumped_answer_comes_back_typed() -> None:
    d = Driver(spec(output=Weather))
    d.start()
    d.reply(call("b", "final_answer", city="上海", temp_c=29))
    loop = Loop.load(d.loop.spec, d.loop.dump())
    [finish] = loop.outstanding_commands()
    assert finish.output == Weather("上海", 29)


def test_an_answer_wrong_past_the_retries_stops_the_run_as_invalid_output() -> None:
    d = Driver(spec(output=Weather, guards=Guards(max_output_retries=1)))
    d.start()
    d.reply(call("a", "final_answer", city="北京"))
    [finish] = d.reply(call("b", "final_answer", city="北京", temp_c=[]))
    assert finish.reason is StopReason.invalid_output and finish.output is None
    assert isinstance(d.state.messages[-1], ToolResults)
    validate_history(d.state.messages)


def test_text_instead_of_the_answer_tool_is_sent_back_asking_for_the_tool() -> None:
    d = Driver(spec(output=Weather))
    d.start()
    [again] = d.reply("It is warm.")
    assert d.state.messages[-1] == UserMessage(
        "Give your final answer by calling the final_answer tool."
    )
    assert again.request.tool_choice == UseTool("final_answer")  # the loop forces the tool
    [finish] = d.reply(call("b", "final_answer", city="北京", temp_c=26))
    assert finish.output == Weather("北京", 26)


def test_native_structured_output_is_asked_of_the_format_and_checked() -> None:
    d = Driver(spec(output=Weather, output_mode="native"))
    [ask] = d.start()
    assert ask.request.tools == () and ask.request.tool_choice == "auto"
    assert ask.request.output == OutputFormat(
        "Weather", ask.request.output.schema
    ) and ask.request.output.schema["properties"]["temp_c"] == {"type": "integer"}
    d.reply('{"city": "北京", "temp_c": "hot"}')
    assert "does not fit its schema" in d.state.messages[-1].content
    d.reply("not json at all")
    assert "the answer is not JSON" in d.state.messages[-1].content
    [finish] = d.reply('{"city": "北京", "temp_c": 26}')
    assert finish.reason is StopReason.completed and finish.output == Weather("北京", 26)


def test_an_output_type_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="must be an object type"):
        Loop(LoopSpec(output=list[int]))


@pytest.mark.parametrize("name", ["Weather", "tests.x:f.<locals>.Local", "a b", ""])
def test_a_string_that_is_no_import_name_is_refused_as_an_output_type(name: str) -> None:
    """A string stands for a type only as `module:qualname`; any other is refused as a spec
    error (msgspec before 0.21 read it as a forward reference and raised a SyntaxError)."""
    with pytest.raises(InvalidSpec, match=r"object type .* or its import name"):
        LoopSpec(output=name)


def test_the_loop_offers_the_tool_choice_it_decides() -> None:
    """Without an output type the model may call tools; finalizing, it is offered none."""
    d = Driver(spec("search", guards=Guards(max_turns=1)))
    [ask] = d.start()
    assert ask.request.tool_choice == "auto" and [t.name for t in ask.request.tools] == ["search"]
    d.reply(call("s", "search"))
    [final] = d.result("s")
    assert final.request.purpose == "finalize" and final.request.tools == ()


class Report(msgspec.Struct):
    city: str
    note: str | None = None  # optional: strict modes demand every property be required


def test_strict_only_where_every_property_is_required_and_then_closed() -> None:
    [ask] = Driver(spec(output=Weather)).start()
    answer = ask.request.tools[-1]
    assert answer.strict is True and answer.parameters["additionalProperties"] is False
    [ask] = Driver(spec(output=Report)).start()
    answer = ask.request.tools[-1]
    assert answer.strict is False and "additionalProperties" not in answer.parameters
    [ask] = Driver(spec(output=Report, output_mode="native")).start()
    assert ask.request.output.strict is False


class Reading(msgspec.Struct):
    value: float


def test_a_native_answer_holding_nan_is_sent_back_not_kept() -> None:
    """Python's JSON parser reads NaN; kept, the state could not be written down."""
    d = Driver(spec(output=Reading, output_mode="native"))
    d.start()
    d.reply('{"value": NaN}')
    assert "NaN is no JSON number" in d.state.messages[-1].content
    [finish] = d.reply('{"value": 1.5}')
    assert finish.output == Reading(1.5)
    assert Loop.load(d.loop.spec, d.loop.dump()).state.output == {"value": 1.5}


def test_an_output_type_s_schema_is_built_once_per_type_and_mode() -> None:
    class Answer(msgspec.Struct):
        city: str

    def offered(mode: str) -> tuple[Any, ...]:
        loop = Loop(LoopSpec(output=Answer, output_mode=mode))  # type: ignore[arg-type]
        [ask] = loop.start("which city?", 0.0)
        return ask.request.tools, ask.request.output

    tools, _ = offered("tool")
    again, _ = offered("tool")
    assert tools[-1] is again[-1] and tools[-1].name == "final_answer"
    _, native = offered("native")
    _, once_more = offered("native")
    assert native is once_more and native.schema["required"] == ["city"]
