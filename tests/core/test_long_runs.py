"""Long runs: compaction instead of a stop, what a run costs and its budget, fallback models."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import (
    CallModel,
    Compaction,
    Guards,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Price,
    StopReason,
)
from turnstile.core.messages import AssistantMessage, Thinking, ToolResults, Usage, validate_history
from turnstile.core.request import Purpose

from tests.core._drive import Driver, call, reply, spec

NO_LIMITS = {
    "max_turns": None,
    "deadline_s": None,
    "max_repeated_calls": None,
    "max_stalled_rounds": None,
}


def small_window(strategy: str, **policy: object) -> LoopSpec:
    guards = Guards(context_window=1_000, reserve_tokens=100, **NO_LIMITS)
    return spec("read", guards=guards, compaction=Compaction(strategy=strategy, **policy))


def turns(d: Driver, n: int, size: int = 300) -> CallModel:
    """`n` turns, each a call to `read` with a thinking block and a result of `size` bytes;
    returns the request after the last."""
    ask = None
    for i in range(d.state.turns, d.state.turns + n):
        d.reply(
            Thinking(f"step {i}", signature=f"sig{i}"), call(f"c{i}", "read", n=i), usage=Usage()
        )
        [ask] = d.result(f"c{i}", "x" * size)
    assert isinstance(ask, CallModel)
    return ask


@pytest.mark.parametrize("strategy", ["clear_tool_results", "drop_turns"])
def test_a_compacted_request_stays_under_the_window_and_the_ledger_keeps_everything(
    strategy: str,
) -> None:
    d = Driver(small_window(strategy))
    d.start("read everything")
    ask = turns(d, 12)
    assert ask.request.purpose is Purpose.turn
    assert d.state.compactions, "the conversation outgrew the window: it was compacted"
    assert d.state.context_tokens <= 0.8 * 1_000
    assert len(d.state.messages) == 1 + 2 * 12  # the ledger: every reply and result
    sent = list(ask.request.messages)
    validate_history(sent)
    assert sent[-2:] == d.state.messages[-2:]  # the newest turn as it came
    replies = [m for m in sent if type(m) is AssistantMessage]
    assert all(m in d.state.messages for m in replies), "replies are sent whole, signatures too"
    if strategy == "clear_tool_results":
        assert len(sent) == len(d.state.messages)
        assert any(
            r.content.startswith("[cleared by turnstile")
            for m in sent
            if type(m) is ToolResults
            for r in m.results
        )
    else:
        assert len(sent) < len(d.state.messages)
        assert sent[0] != d.state.messages[0] and "left out" in sent[0].content


def test_a_summary_is_one_more_call_and_its_reply_stands_for_the_older_turns() -> None:
    d = Driver(small_window("summarize"))
    d.start("read everything")
    for i in range(20):
        d.reply(call(f"c{i}", "read", n=i), usage=Usage())
        [ask] = d.result(f"c{i}", "x" * 300)
        if ask.request.purpose is Purpose.summarize:
            break
    assert d.state.phase == "compacting"
    summary_ask = ask.request
    assert summary_ask.tool_choice == "none" and summary_ask.messages[-1].content.startswith(
        "Your context window is nearly full"
    )
    validate_history(summary_ask.messages)
    turns_before = d.state.turns
    [ask] = d.reply("I read files 0 to 3: all x.", usage=Usage(700, 20))
    assert d.state.phase == "awaiting_model" and d.state.turns == turns_before
    assert ask.request.purpose is Purpose.turn
    first = ask.request.messages[0]
    assert first.content.startswith("read everything") and "I read files 0 to 3" in first.content
    record = d.state.compactions[-1]
    assert record.summary == "I read files 0 to 3: all x." and record.command_id is not None
    assert all(type(m) is not AssistantMessage or "I read" not in str(m) for m in d.state.messages)
    validate_history(ask.request.messages)


def test_the_context_guard_still_stops_what_compaction_cannot_save() -> None:
    d = Driver(small_window("drop_turns", keep_turns=3))
    d.start("go")
    for i in range(3):
        d.reply(call(f"c{i}", "read", n=i), usage=Usage())
        commands = d.result(f"c{i}", "y" * 1_100)  # each turn alone is near the window
    [final] = commands
    assert final.request.purpose is Purpose.finalize
    assert d.state.stop_reason is StopReason.context_budget


def test_a_replay_of_the_log_compacts_the_same() -> None:
    for strategy in ("clear_tool_results", "drop_turns", "summarize"):
        d = Driver(small_window(strategy))
        d.start("go")
        for i in range(15):
            if d.state.phase == "compacting":
                d.reply(f"summary {i}", usage=Usage())
            d.reply(call(f"c{i}", "read", n=i), usage=Usage())
            d.result(f"c{i}", "z" * 300)
        again = Loop.replay(d.loop.spec, d.state.events)
        assert again.state == d.state and again.dump() == d.loop.dump()
        assert again.outstanding_commands() == d.loop.outstanding_commands()
        loaded = Loop.load(d.loop.spec, d.loop.dump())
        assert loaded.outstanding_commands() == d.loop.outstanding_commands()


def test_compaction_needs_a_window_and_sensible_fractions() -> None:
    with pytest.raises(ValueError, match="context_window"):
        LoopSpec(guards=Guards(context_window=None), compaction=Compaction(strategy="drop_turns"))
    with pytest.raises(ValueError, match="target"):
        Compaction(strategy="drop_turns", threshold=0.5, target=0.6)
    with pytest.raises(ValueError, match="keep_turns"):
        Compaction(strategy="drop_turns", keep_turns=0)
    shipped = small_window("summarize", keep_turns=4)
    assert msgspec.json.decode(msgspec.json.encode(shipped), type=LoopSpec) == shipped


# -- cost -------------------------------------------------------------------------------------

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


# -- fallback models --------------------------------------------------------------------------


def test_a_model_failing_past_its_retries_gives_way_to_the_next() -> None:
    guards = Guards(max_model_retries=1, context_window=None, **NO_LIMITS)
    prices = {"big": Price(input=10.0, output=10.0), "small": Price(input=1.0, output=1.0)}
    d = Driver(spec("read", guards=guards, models=("big", "small"), prices=prices))
    [first] = d.start()
    assert first.request.model == "big"
    [retry] = d.send(ModelFailed(first.id, "overloaded", True, kind="overloaded", now=1.0))
    assert retry.request.model == "big" and retry.not_before is not None
    [fallback] = d.send(ModelFailed(retry.id, "overloaded", True, now=50.0))
    assert fallback.request.model == "small" and fallback.not_before is None
    d.now = 51.0
    d.reply(call("a", "read"), usage=Usage(1_000_000, 0))
    [ask] = d.result("a")
    assert ask.request.model == "small", "the run stays with the model that answers"
    [finish] = d.reply("done", usage=Usage(0, 0))
    assert finish.reason is StopReason.completed
    events = d.state.events
    assert [e.model for e in events if type(e) in (ModelFailed, ModelReplied)] == [
        "big", "big", "small", "small"
    ]  # fmt: skip
    assert d.state.cost == pytest.approx(1.0)  # priced as the model that answered
    # a final failure is not retried on another model; nor is the last model's
    d = Driver(spec("read", guards=guards, models=("big", "small")))
    [first] = d.start()
    [finish] = d.send(ModelFailed(first.id, "bad request", False, now=1.0))
    assert finish.reason is StopReason.model_error


def test_the_executor_s_word_on_the_model_is_kept() -> None:
    d = Driver(spec(models=("claude",)))
    [first] = d.start()
    d.send(ModelReplied(first.id, reply("hi"), model="claude-20250929", now=1.0))
    assert d.state.events[-1].model == "claude-20250929"


def test_a_reply_named_with_a_date_is_priced_as_the_model_asked() -> None:
    d = Driver(spec(models=("sonnet",), prices={"sonnet": SONNET}))
    [first] = d.start()
    response = reply("hi", usage=Usage(1_000_000, 0))
    d.send(ModelReplied(first.id, response, model="sonnet-20250929", now=1.0))
    assert d.state.cost == pytest.approx(3.0)
