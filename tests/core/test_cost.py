"""Cost: what a run costs by each model's price, the cost budget, token counts that would lower
the cost refused, and a cost past a float still dumps."""

from __future__ import annotations

import math

import msgspec
import pytest
from turnstile.core import (
    Guards,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelReplied,
    Price,
    StopReason,
    ToolReturned,
)
from turnstile.core.messages import Usage
from turnstile.core.request import Purpose

from tests.core._drive import Driver, call, reply, spec


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


NO_LIMITS = {
    "max_turns": None,
    "deadline_s": None,
    "max_repeated_calls": None,
    "max_stalled_rounds": None,
}


SONNET = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


def test_a_price_counts_cached_input_apart() -> None:
    usage = Usage(input_tokens=10_000, output_tokens=1_000, cache_read_tokens=6_000,
                  cache_write_tokens=2_000)  # fmt: skip
    assert SONNET.of(usage) == pytest.approx(
        (2_000 * 3 + 6_000 * 0.3 + 2_000 * 3.75 + 15_000) / 1e6
    )
    assert Price(input=1.0, output=2.0).of(usage) == pytest.approx((10_000 + 2_000) / 1e6)
    with pytest.raises(ValueError):
        Price(input=-1.0, output=1.0)


def test_the_cost_budget_finalizes_like_the_other_budgets() -> None:
    guards = Guards(max_cost=0.05, **NO_LIMITS)
    d = Driver(spec("read", guards=guards, models=("sonnet",), prices={"sonnet": SONNET}))
    d.start()
    d.reply(call("a", "read"), usage=Usage(10_000, 200))  # 0.033
    [ask] = d.result("a")
    assert ask.request.purpose is Purpose.turn and ask.request.model == "sonnet"
    d.reply(call("b", "read"), usage=Usage(10_000, 200))  # 0.066: over
    [final] = d.result("b")
    assert final.request.purpose is Purpose.finalize
    d.reply("what I have", usage=Usage(10_000, 100))
    assert d.state.stop_reason is StopReason.cost_budget
    assert d.state.cost == pytest.approx(3 * 0.03 + 0.003 * 2 + 0.0015)
    assert d.state.usage == Usage(30_000, 500)
    # a new run over the conversation: its budget counts afresh
    d.start("and now?")
    assert d.state.phase == "awaiting_model"


def test_a_cost_budget_needs_every_model_priced() -> None:
    with pytest.raises(ValueError, match="no price for haiku"):
        LoopSpec(guards=Guards(max_cost=1.0), models=("sonnet", "haiku"), prices={"sonnet": SONNET})
    with pytest.raises(ValueError, match="models"):
        LoopSpec(guards=Guards(max_cost=1.0))
    with pytest.raises(ValueError, match="max_cost"):
        Guards(max_cost=0.0)


def test_a_reply_named_with_a_date_is_priced_as_the_model_asked() -> None:
    d = Driver(spec(models=("sonnet",), prices={"sonnet": SONNET}))
    [first] = d.start()
    response = reply("hi", usage=Usage(1_000_000, 0))
    d.send(ModelReplied(first.id, response, model="sonnet-20250929", now=1.0))
    assert d.state.cost == pytest.approx(3.0)


def test_a_result_that_spent_on_models_of_its_own_counts_in_the_totals_and_the_budget() -> None:
    """A sub-agent's run: its tokens and cost join the run's, and a budget it exhausts stops
    the run after that result; its tokens are not the run's context."""
    guards = Guards(max_cost=0.05, finalize=False, **NO_LIMITS)
    d = Driver(spec("read", guards=guards, models=("sonnet",), prices={"sonnet": SONNET}))
    d.start()
    d.reply(call("a", "read"), usage=Usage(1_000, 0))  # 0.003
    context = d.state.context_tokens
    spent = ToolReturned("a", "found", usage=Usage(5_000, 100), cost=0.06, now=d.now + 1)
    [finish] = d.send(spent)
    assert d.state.stop_reason is StopReason.cost_budget, finish
    assert d.state.cost == pytest.approx(0.063)
    assert d.state.usage == Usage(6_000, 100)
    assert d.state.context_tokens - context < 100  # the result's text, not the child's tokens
    assert Loop.replay(d.loop.spec, d.state.events).state == d.state


def test_a_result_that_spent_nothing_is_written_as_before() -> None:
    plain = ToolReturned("a", "ok", now=1.0)
    assert msgspec.json.encode(plain) == (
        b'{"type":"tool_returned","call_id":"a","content":"ok","is_error":false,"now":1.0}'
    )
    spent = msgspec.json.decode(
        msgspec.json.encode(ToolReturned("a", "ok", cost=0.5, now=1.0)), type=ToolReturned
    )
    assert spent.cost == 0.5 and spent.usage is msgspec.UNSET


@pytest.mark.parametrize(
    ("spent", "field"),
    [({"cost": -1.0}, "cost"), ({"cost": math.nan}, "cost"), ({"usage": Usage(-10, 0)}, "usage")],
)
def test_a_result_that_would_lower_what_the_run_spent_is_invalid_observation(
    spent: dict[str, object], field: str
) -> None:
    d = Driver(spec("read", models=("m",), prices={"m": SONNET}))
    d.start()
    d.reply(call("a", "read"))
    before = d.loop.dump()
    with pytest.raises(InvalidObservation, match=field):
        d.send(ToolReturned("a", "found", now=d.now + 1, **spent))  # type: ignore[arg-type]
    assert d.loop.dump() == before
