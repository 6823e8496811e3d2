"""A spec is checked whole when it is built: a field no run can use (a function that is no
tool, two tools of one name, a budget of 0, an output that is no object type) is a typed error
naming the field and the fix, never a failure in the middle of a run. (A field of the wrong
type is refused by the check every spec struct runs: test_fields.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    Compaction,
    Guards,
    InvalidSpec,
    Loop,
    LoopSpec,
    Price,
    ToolSpec,
    TurnstileError,
    tool,
)
from turnstile.core.conditions import TurnCountIs
from turnstile.core.messages import UserMessage
from turnstile.core.request import CachePolicy, ServerTool


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Answer(msgspec.Struct):
    text: str


def plain_function(city: str) -> str:
    return city


def test_a_tool_is_accepted_where_its_spec_is_meant() -> None:
    spec = LoopSpec(tools=(get_weather,))
    assert spec.tools == (get_weather.spec,)
    [call_model] = Loop(spec).start([UserMessage("weather in Paris?")], now=0.0)
    assert [t.name for t in call_model.request.tools] == ["get_weather"]


@pytest.mark.parametrize(
    ("build", "field", "fix"),
    [
        (lambda: LoopSpec(tools=(plain_function,)), "LoopSpec.tools[0]", "@tool"),
        (lambda: LoopSpec(tools=(get_weather, get_weather.spec)), "LoopSpec.tools", "named"),
        (
            lambda: LoopSpec(tools=(ToolSpec("final_answer"),), output=Answer),
            "LoopSpec.tools",
            "another",
        ),
        (lambda: LoopSpec(max_tokens=0), "LoopSpec.max_tokens", "1 or more"),
        (lambda: LoopSpec(stop_when=(3,)), "LoopSpec.stop_when[0]", "TurnCountIs"),
        (lambda: LoopSpec(output=int), "LoopSpec.output", "object type"),
        (lambda: LoopSpec(output="Answer"), "LoopSpec.output", "object type"),
        (lambda: Guards(max_turns=0), "Guards.max_turns", "1 or more"),
        (
            lambda: Compaction(strategy="summarize", keep_turns=0),
            "Compaction.keep_turns",
            "1 or more",
        ),
        (lambda: Price(input=-1, output=15), "Price", "0 or more"),
    ],
)
def test_a_spec_field_no_run_can_use_is_refused_when_built_naming_it_and_the_fix(
    build: Callable[[], Any], field: str, fix: str
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        build()
    assert isinstance(caught.value, TurnstileError) and isinstance(caught.value, ValueError)
    assert caught.value.field == field
    assert str(caught.value).startswith(field) and fix in str(caught.value)


def test_a_spec_decoded_from_json_is_checked_the_same() -> None:
    with pytest.raises(msgspec.ValidationError, match="max_tokens"):
        msgspec.json.decode(b'{"max_tokens": 0}', type=LoopSpec)


def test_a_spec_of_every_field_round_trips_as_json_unchanged() -> None:
    spec = LoopSpec(
        system="be brief",
        tools=(get_weather,),
        guards=Guards(max_turns=3, max_cost=1.0),
        stop_when=(TurnCountIs(2),),
        max_tokens=100,
        server_tools=(ServerTool("openai_chat", {"type": "web_search"}),),
        cache=CachePolicy(ttl="1h"),
        models=("m",),
        prices={"m": Price(input=1.0, output=2.0)},
        compaction=Compaction(strategy="drop_turns"),
    )
    data = msgspec.json.encode(spec)
    again = msgspec.json.decode(data, type=LoopSpec)
    assert again == spec and msgspec.json.encode(again) == data
