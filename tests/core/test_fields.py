"""Every spec struct checks its fields when it is built, as msgspec checks them only when it
decodes: a field of the wrong kind is an `InvalidSpec` naming the field (and the item, in a
tuple or a dict) and how to give it instead, where it was written, not an `AttributeError` in
the middle of a run."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from turnstile.core import (
    Compaction,
    Guards,
    InvalidSpec,
    LoopSpec,
    Price,
    ToolSpec,
    TurnstileError,
    tool,
)
from turnstile.core.request import CachePolicy, ServerTool


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def refused(build: Callable[[], Any]) -> InvalidSpec:
    with pytest.raises(InvalidSpec) as caught:
        build()
    return caught.value


@pytest.mark.parametrize(
    ("build", "field", "fix"),
    [
        (lambda: LoopSpec(tools=get_weather), "LoopSpec.tools", "tuple"),
        (lambda: LoopSpec(tools=("get_weather",)), "LoopSpec.tools[0]", "ToolSpec"),
        (lambda: LoopSpec(system=["be brief"]), "LoopSpec.system", "str"),
        (lambda: LoopSpec(guards={"max_turns": 3}), "LoopSpec.guards", "Guards("),
        (lambda: LoopSpec(max_tokens="1024"), "LoopSpec.max_tokens", "int"),
        (lambda: LoopSpec(server_tools=({"type": "web"},)), "LoopSpec.server_tools[0]", "Server"),
        (lambda: LoopSpec(cache=False), "LoopSpec.cache", "CachePolicy("),
        (lambda: LoopSpec(output_mode="json"), "LoopSpec.output_mode", "'tool'"),
        (lambda: LoopSpec(models="gpt-4o"), "LoopSpec.models", "tuple"),
        (lambda: LoopSpec(prices={"m": 1.0}), "LoopSpec.prices['m']", "Price("),
        (lambda: LoopSpec(compaction="summarize"), "LoopSpec.compaction", "Compaction("),
        (lambda: Guards(max_turns="5"), "Guards.max_turns", "int"),
        (lambda: Guards(deadline_s=math.nan), "Guards.deadline_s", "float"),
        (lambda: Guards(finalize="no"), "Guards.finalize", "bool"),
        (lambda: Compaction(strategy="shrink"), "Compaction.strategy", "'summarize'"),
        (lambda: Price(input="3", output=15), "Price.input", "float"),
        (lambda: ToolSpec(3), "ToolSpec.name", "str"),
        (lambda: ToolSpec("t", parameters="{}"), "ToolSpec.parameters", "dict"),
        (lambda: CachePolicy(ttl="1d"), "CachePolicy.ttl", "'1h'"),
        (lambda: ServerTool("openai_chat", "web_search"), "ServerTool.definition", "dict"),
    ],
)
def test_a_field_of_the_wrong_kind_is_refused_when_built_naming_it_and_the_fix(
    build: Callable[[], Any], field: str, fix: str
) -> None:
    error = refused(build)
    assert isinstance(error, TurnstileError) and isinstance(error, ValueError)
    assert error.field == field
    assert str(error).startswith(field) and fix in str(error)


def test_a_list_is_accepted_where_a_tuple_is_meant() -> None:
    spec = LoopSpec(tools=[get_weather], models=["a", "b"])
    assert spec.tools == (get_weather.spec,) and spec.models == ("a", "b")
    assert hash(spec.guards) == hash(Guards())


def test_a_wrong_item_of_a_tuple_is_named_by_its_index() -> None:
    error = refused(lambda: LoopSpec(models=("a", 3)))
    assert error.field == "LoopSpec.models[1]" and "expected str, got int 3" in str(error)


def test_a_key_of_the_wrong_kind_is_named_as_the_dict_s_field() -> None:
    error = refused(lambda: LoopSpec(prices={1: Price(input=1.0, output=1.0)}))
    assert error.field == "LoopSpec.prices" and "expected str, got int 1" in str(error)


def test_a_bool_is_no_int_but_an_int_is_a_float() -> None:
    assert "got bool True" in str(refused(lambda: Guards(max_turns=True)))
    assert Guards(deadline_s=10).deadline_s == 10
    assert Price(input=3, output=15).input == 3


def test_a_long_value_is_shown_cut_short() -> None:
    message = str(refused(lambda: ToolSpec(["x" * 500])))
    assert message.endswith("...") and len(message) < 120


def test_the_same_struct_is_checked_again_each_time_it_is_built() -> None:
    assert Guards(max_turns=3).max_turns == 3
    refused(lambda: Guards(max_turns="3"))
    assert Guards(max_turns=None).max_turns is None
    refused(lambda: Guards(max_turns=math.nan))
