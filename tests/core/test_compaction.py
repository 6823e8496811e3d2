"""Compaction: a long run compacts instead of stopping, by each strategy; its records survive a
dump only as a loop could have written them; a summary asked for is asked again after a restart."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings, target
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import (
    CallModel,
    Compaction,
    CorruptState,
    Guards,
    Loop,
    LoopSpec,
    ModelReplied,
    StopReason,
)
from turnstile.core.messages import (
    AssistantMessage,
    Thinking,
    ToolResults,
    Usage,
    UserMessage,
    validate_history,
)
from turnstile.core.request import Purpose

from tests.core._drive import Driver, call, reply, spec
from tests.core._scripts import (
    Run,
    check_consistent,
    drive,
    specs,
)


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


LONG = Guards(
    max_turns=None,
    deadline_s=None,
    context_window=700,
    reserve_tokens=50,
    max_repeated_calls=None,
    max_stalled_rounds=None,
    max_failed_rounds=None,
)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    strategy=st.sampled_from(["clear_tool_results", "drop_turns", "summarize"]),
    keep=st.integers(1, 3),
)
def test_compacting_runs_keep_every_rule_and_dump_load_and_replay_at_every_step(
    data: st.DataObject, strategy: str, keep: int
) -> None:
    """Long random runs in a small window, compacted by each strategy: every request valid (the
    `Run` checks it), and at every step the state dumps and loads back equal, sends the same,
    and a replay of its log rebuilds it."""
    policy = Compaction(strategy=strategy, keep_turns=keep)  # type: ignore[arg-type]
    spec = replace(data.draw(specs(guards=LONG, stop_when=())), compaction=policy)

    def same_after_load_and_replay(run: Run) -> None:
        loaded = Loop.load(spec, run.loop.dump())
        assert loaded.state == run.state and loaded.dump() == run.loop.dump()
        assert loaded.outstanding_commands() == run.loop.outstanding_commands()
        replayed = Loop.replay(spec, run.state.events)
        assert replayed.dump() == run.loop.dump()

    run = Run(spec)
    run.unmetered = data.draw(st.booleans())
    drive(data, run, steps=90, on_step=same_after_load_and_replay)
    run.check_finished()
    target(float(len(run.state.compactions)), label="compactions")
