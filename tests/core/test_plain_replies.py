"""A plain reply (text and calls with flat arguments, ASCII text, finite numbers) is taken at the
boundary without a JSON round trip: what it becomes is exactly what the round trip makes of it,
the state's own copy, and anything less plain still goes the careful way."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import InvalidObservation, ModelReplied
from turnstile.core._boundary import _copied, _plain_reply
from turnstile.core.messages import ModelResponse, ModelStop, Text, Thinking, ToolCall, Usage

ASCII = st.text(st.characters(max_codepoint=127), max_size=8)
ODD_TEXTS = st.text(max_size=4).filter(lambda t: not t.isascii()) | st.sampled_from(["\ud800", 3])
BIG = [-(2**63) - 1, 2**63, 2**64]
SCALARS = (
    st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.none()
    | ASCII
)
FLAT = st.dictionaries(ASCII, SCALARS, max_size=4)
ODD_ARGUMENTS = (
    st.dictionaries(ASCII, st.lists(SCALARS, max_size=2) | FLAT, min_size=1, max_size=2)
    | st.sampled_from([[], None, {1: 2}, {"é": 1}, *({"x": n} for n in BIG)])
    | st.sampled_from([math.nan, math.inf, "\ud800", "é"]).map(lambda v: {"x": v})
)
ODD_COUNTS = st.sampled_from([-1, *BIG, 1.0, None, True])
ODD_PROVIDER_DATA = st.sampled_from([{"id": "x"}, "sig", 0])


@st.composite
def replies(draw: Any) -> ModelReplied:
    """A plain reply, or one with a single field that is not plain."""
    content: list[Any] = []
    for name, arguments in draw(st.lists(st.tuples(ASCII, FLAT), max_size=3)):
        content.append(Text(draw(ASCII)))
        content.append(ToolCall(draw(ASCII), name, arguments))
    response = ModelResponse(content, draw(st.sampled_from(ModelStop)), Usage(3, 4, 0, 1, 2))
    obs = ModelReplied(command_id=draw(ASCII), response=response, now=draw(st.floats(0, 1e9)))
    odd = draw(st.integers(0, 2 * len(SPOILS)))  # half of them plain
    return SPOILS[odd](draw, obs) if odd < len(SPOILS) else obs


def _part(draw: Any, obs: ModelReplied, **changes: Any) -> ModelReplied:
    """`obs` with a part added, or with the changes to one of its calls."""
    content = list(obs.response.content)
    calls = [i for i, p in enumerate(content) if type(p) is ToolCall]
    if changes and calls:
        i = draw(st.sampled_from(calls))
        content[i] = replace(content[i], **changes)
    else:
        content.append(
            draw(st.sampled_from([Thinking("hm"), {"type": "text", "text": "a dict"}, None]))
        )
    return replace(obs, response=replace(obs.response, content=content))


def _response(obs: ModelReplied, **changes: Any) -> ModelReplied:
    return replace(obs, response=replace(obs.response, **changes))


SPOILS: list[Callable[[Any, ModelReplied], ModelReplied]] = [
    lambda draw, o: replace(o, now=draw(st.sampled_from([math.nan, math.inf, 1, "1"]))),
    lambda draw, o: replace(o, command_id=draw(ODD_TEXTS | st.none())),
    lambda draw, o: replace(o, model=draw(ODD_TEXTS)),
    lambda draw, o: _response(o, content=draw(st.sampled_from([(), None, "text"]))),
    lambda draw, o: _response(o, stop=draw(st.sampled_from(["end_turn", "over", None]))),
    lambda draw, o: _response(o, usage=draw(st.sampled_from([None, {"input_tokens": 1}]))),
    lambda draw, o: _response(
        o, usage=Usage(*draw(st.permutations([draw(ODD_COUNTS), 1, 2, 3, 4])))
    ),
    lambda draw, o: _response(
        o, **{draw(st.sampled_from(["raw_stop", "id", "model"])): draw(ODD_TEXTS)}
    ),
    lambda draw, o: _part(draw, o),
    lambda draw, o: _part(draw, o, arguments=draw(ODD_ARGUMENTS)),
    lambda draw, o: _part(draw, o, **{draw(st.sampled_from(["id", "name"])): draw(ODD_TEXTS)}),
    lambda draw, o: _part(draw, o, raw_arguments=draw(ODD_TEXTS | ASCII)),
    lambda draw, o: _part(draw, o, complete=draw(st.sampled_from([1, None, "yes"]))),
    lambda draw, o: _part(draw, o, provider_data=draw(ODD_PROVIDER_DATA)),
]


@settings(max_examples=500, deadline=None)
@given(replies())
def test_a_reply_taken_without_a_round_trip_is_what_the_round_trip_makes_of_it(
    obs: ModelReplied,
) -> None:
    fast = _plain_reply(obs)
    if fast is None:
        return  # the careful way, as before
    careful = _copied(obs)  # raises if the careful way would refuse what was taken
    assert fast == careful
    assert msgspec.json.encode(fast) == msgspec.json.encode(careful)
    assert type(fast.response.content) is list
    assert fast.response.content is not obs.response.content
    for mine, given_ in zip(fast.response.content, obs.response.content, strict=True):
        if type(mine) is ToolCall:
            assert mine.arguments is not given_.arguments  # the state's own copy


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(ASCII, ASCII, FLAT), max_size=3),
    st.sampled_from(list(ModelStop)),
)
def test_a_plain_reply_skips_the_round_trip(calls: list[Any], stop: ModelStop) -> None:
    content: list[Any] = [Text("thinking it over")]
    content += [ToolCall(i, n, a) for i, n, a in calls]
    obs = ModelReplied(command_id="model-1", response=ModelResponse(content, stop), now=2.0)
    fast = _plain_reply(obs)
    assert fast is not None
    assert fast == _copied(obs)


def test_a_reply_the_careful_way_refuses_is_not_taken_the_fast_way() -> None:
    bad = ModelResponse([Text("ok")], ModelStop.end_turn, Usage(-1))
    obs = ModelReplied(command_id="model-1", response=bad, now=2.0)
    assert _plain_reply(obs) is None
    with pytest.raises(InvalidObservation, match="input_tokens"):
        _copied(obs)
