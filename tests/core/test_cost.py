"""Cost: token counts that would lower it are refused, and a cost past a float still dumps."""

from __future__ import annotations

import math

import msgspec
import pytest
from turnstile.core import (
    Guards,
    InvalidObservation,
    Loop,
    ModelReplied,
    Price,
    Usage,
)

from tests.core._drive import call, reply, spec


@pytest.mark.parametrize("field", ["input_tokens", "output_tokens", "cache_read_tokens"])
def test_a_reply_counting_negative_tokens_is_invalid_observation(field: str) -> None:
    """Negative counts would lower the run's cost and context size, so that neither the cost
    budget nor the context guard (nor compaction) ever fires."""
    loop = Loop(spec("read", models=("m",), prices={"m": Price(input=3.0, output=15.0)}))
    [ask] = loop.start("go", 0.0)
    usage = msgspec.structs.replace(Usage(10, 5), **{field: -1_000_000})
    bad = ModelReplied(ask.id, reply("hi", usage=usage), now=1.0)
    with pytest.raises(InvalidObservation, match=field):
        loop.send(bad)
    assert loop.state.cost == 0.0 and loop.state.phase == "awaiting_model"


def test_a_cost_past_what_a_float_holds_still_dumps_and_loads() -> None:
    """Prices are any finite numbers and token counts any integers: their product may not be
    finite, and a state whose cost is written as null would not load."""
    prices = {"m": Price(input=1e300, output=1e300)}
    s = spec("read", guards=Guards(context_window=None), models=("m",), prices=prices)
    loop = Loop(s)
    [ask] = loop.start("go", 0.0)
    loop.send(ModelReplied(ask.id, reply(call("c0", "read"), usage=Usage(10**9, 10**9)), now=1.0))
    assert math.isfinite(loop.state.cost)
    assert Loop.load(s, loop.dump()).state == loop.state
