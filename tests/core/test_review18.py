"""Review of issue 18 (compaction, cost, fallback models): the cases its own tests missed."""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from turnstile.core import (
    CallModel,
    Compaction,
    CorruptState,
    Guards,
    InvalidObservation,
    Loop,
    ModelReplied,
    Price,
)
from turnstile.core.messages import Usage, UserMessage, validate_history
from turnstile.core.request import Purpose

from tests.core._drive import Driver, call, reply, spec
from tests.core._scripts import Run, check_consistent, drive, specs
from tests.core.test_long_runs import small_window
from tests.core.test_properties import LONG


def _redumped(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    """`data` with its state edited and its checksum made to match again."""
    dump = json.loads(data)
    edit(dump["state"])
    body = json.dumps(dump["state"], separators=(",", ":")).encode()
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(body), body)


def _compacted_run(strategy: str, until_compacting: bool = False) -> Driver:
    d = Driver(small_window(strategy))
    d.start("go")
    for i in range(10):
        if d.state.phase == "compacting":
            if until_compacting:
                return d
            d.reply(f"summary {i}", usage=Usage())
        d.reply(call(f"c{i}", "read", n=i), usage=Usage())
        d.result(f"c{i}", "z" * 300)
    assert d.state.compactions
    return d


Edit = Callable[[dict[str, Any]], None]


def _set(field: str, value: Callable[[dict[str, Any], int], Any]) -> Edit:
    def edit(state: dict[str, Any]) -> None:
        record = state["compactions"][-1]
        record[field] = value(record, len(state["messages"]))

    return edit


BROKEN_RECORDS = {
    "head past the ledger": _set("head", lambda r, n: n + 5),
    "head negative": _set("head", lambda r, n: -3),
    "head not the first reply": _set("head", lambda r, n: r["head"] + 2),
    "upto past the ledger": _set("upto", lambda r, n: n + 5),
    "upto inside a round": _set("upto", lambda r, n: r["upto"] - 1),
    "upto before head": _set("upto", lambda r, n: 0),
    "at past the ledger": _set("at", lambda r, n: n + 1),
}


@pytest.mark.parametrize("strategy", ["clear_tool_results", "drop_turns", "summarize"])
@pytest.mark.parametrize("broken", list(BROKEN_RECORDS))
def test_a_dump_with_a_broken_compaction_record_is_corrupt_state(
    strategy: str, broken: str
) -> None:
    d = _compacted_run(strategy)
    Loop.load(d.loop.spec, d.loop.dump())  # as it was: loads
    with pytest.raises(CorruptState, match="compaction"):
        Loop.load(d.loop.spec, _redumped(d.loop.dump(), BROKEN_RECORDS[broken]))


@pytest.mark.parametrize("where", [-1, 0, 2, 10_000])
def test_a_dump_summarizing_up_to_no_cut_is_corrupt_state(where: int) -> None:
    d = _compacted_run("summarize", until_compacting=True)
    assert d.state.phase == "compacting"
    Loop.load(d.loop.spec, d.loop.dump())

    def edit(state: dict[str, Any]) -> None:
        state["summarizing"] = where

    with pytest.raises(CorruptState, match="summar"):
        Loop.load(d.loop.spec, _redumped(d.loop.dump(), edit))


def test_a_dump_taken_while_summarizing_goes_on_under_a_spec_without_compaction() -> None:
    """Compaction turned off between a crash and the restart: the summary asked for is asked
    for again (in the default words), its reply taken, and the run goes on uncompacted."""
    d = _compacted_run("summarize", until_compacting=True)
    spec = msgspec.structs.replace(d.loop.spec, compaction=None)
    loop = Loop.load(spec, d.loop.dump())
    [ask] = loop.outstanding_commands()
    assert isinstance(ask, CallModel) and ask.request.purpose is Purpose.summarize
    assert ask.request.messages[-1] == UserMessage(Compaction(strategy="summarize").prompt)
    validate_history(list(ask.request.messages))
    [turn] = loop.send(ModelReplied(ask.id, reply("the summary"), now=d.now + 1))
    assert isinstance(turn, CallModel) and turn.request.purpose is Purpose.turn
    assert "the summary" in str(turn.request.messages[0])
    validate_history(list(turn.request.messages))


@pytest.mark.parametrize("prompt", ["", " \n"])
def test_a_summary_prompt_with_nothing_to_say_is_refused_with_the_policy(prompt: str) -> None:
    """An empty prompt would make every summary request an invalid history (an empty user
    message), found only once the window fills."""
    with pytest.raises(ValueError, match="prompt"):
        Compaction(strategy="summarize", prompt=prompt)


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


def test_a_dump_asking_a_model_before_the_first_is_corrupt_state() -> None:
    s = spec("read", models=("a", "b"))
    loop = Loop(s)
    loop.start("go", 0.0)

    def edit(state: dict[str, Any]) -> None:
        state["model_index"] = -5

    with pytest.raises(CorruptState, match="model"):
        Loop.load(s, _redumped(loop.dump(), edit))


NUMBERS = [-1, 0, 1, 2, 3, 5, 8, 13, 10_000, None, "x"]


# most random runs end before they compact (assume drops those): expected, not a slow strategy
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    data=st.data(),
    strategy=st.sampled_from(["clear_tool_results", "drop_turns", "summarize"]),
)
def test_a_compacted_state_changed_behind_a_valid_checksum_is_corrupt_or_sends_valid_requests(
    data: st.DataObject, strategy: str
) -> None:
    """The load fuzz's runs are too short to compact: here long runs compact, and a number in
    their compaction records, the summary asked for or the model asked is changed."""
    policy = Compaction(strategy=strategy, keep_turns=data.draw(st.integers(1, 3)))  # type: ignore[arg-type]
    s = msgspec.structs.replace(data.draw(specs(guards=LONG, stop_when=())), compaction=policy)
    run = Run(s)
    dumps: list[bytes] = []

    def keep(r: Run) -> None:
        if r.state.compactions:
            dumps.append(r.loop.dump())

    drive(data, run, steps=60, on_step=keep)
    assume(dumps)
    dump = data.draw(st.sampled_from(dumps))
    state = json.loads(dump)["state"]
    places: list[tuple[Any, ...]] = [("summarizing",), ("model_index",)]
    for i in range(len(state["compactions"])):
        places += [("compactions", i, field) for field in ("at", "head", "upto")]

    def edit(state: dict[str, Any]) -> None:
        *path, last = data.draw(st.sampled_from(places))
        target = state
        for step in path:
            target = target[step]
        target[last] = data.draw(st.sampled_from(NUMBERS))

    try:
        loop = Loop.load(s, _redumped(dump, edit))
    except CorruptState:
        return
    check_consistent(s, loop, [])
