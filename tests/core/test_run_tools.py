"""Tools given to `Loop.start` (a runner's, an MCP server's) are the run's, recorded in its
`Started` event: a replay or a load with a spec that names none decides the same."""

from __future__ import annotations

import msgspec
from turnstile.core import (
    CallModel,
    Loop,
    LoopSpec,
    ModelReplied,
    RunTool,
    Started,
    ToolReturned,
    ToolSpec,
)

from ._drive import call, reply

LOOKUP = ToolSpec("lookup", "Look a word up", replay_safe=True)
SLOW = ToolSpec("slow", parallel_safe=False)


def _run(loop: Loop) -> list[object]:
    """Two calls in one reply; returns every command handed out, in order."""
    [ask] = loop.start("define two words", 0.0, (LOOKUP, SLOW))
    assert isinstance(ask, CallModel)
    out: list[object] = [ask]
    replied = ModelReplied(ask.id, reply(call("c1", "lookup", w="a"), call("c2", "slow")), now=1)
    for command in loop.send(replied):
        out.append(command)
    return out


def test_the_tools_a_run_is_given_are_offered_and_recorded() -> None:
    loop = Loop(LoopSpec())
    [ask, *runs] = _run(loop)
    assert isinstance(ask, CallModel)
    assert [t.name for t in ask.request.tools] == ["lookup", "slow"]
    assert [r.name for r in runs if isinstance(r, RunTool)] == ["lookup"]  # slow runs alone
    started = loop.state.events[0]
    assert type(started) is Started and started.tools == (LOOKUP, SLOW)


def test_a_replay_and_a_load_without_the_tools_decide_the_same() -> None:
    loop = Loop(LoopSpec())
    _run(loop)
    replayed = Loop.replay(LoopSpec(), loop.state.events)
    loaded = Loop.load(LoopSpec(), loop.dump())
    assert replayed.dump() == loop.dump()
    for again in (replayed, loaded):
        assert again.outstanding_commands() == loop.outstanding_commands()
        commands = again.send(ToolReturned("c1", "a: the first letter", now=2.0))
        assert [c.name for c in commands if isinstance(c, RunTool)] == ["slow"]


def test_a_run_given_no_tools_records_the_specs_and_the_next_run_its_own() -> None:
    loop = Loop(LoopSpec(tools=(LOOKUP,)))
    [ask] = loop.start("hi", 0.0)
    started = loop.state.events[0]
    assert type(started) is Started and started.tools == (LOOKUP,)  # the log describes itself
    loop.send(ModelReplied(ask.id, reply("hello"), now=1.0))
    [again] = loop.start("and now?", 2.0, (SLOW,))
    assert [t.name for t in again.request.tools] == ["slow"]
    assert Loop.load(LoopSpec(tools=(LOOKUP,)), loop.dump()).outstanding_commands() == [again]
    assert Loop.replay(LoopSpec(), loop.state.events).dump() == loop.dump()


def test_a_log_from_before_runs_recorded_the_specs_tools_replays_with_the_spec() -> None:
    spec = LoopSpec(tools=(LOOKUP,))
    loop = Loop(spec)
    [ask] = loop.start("define a", 0.0)
    [run] = loop.send(ModelReplied(ask.id, reply(call("c1", "lookup", w="a")), now=1.0))
    loop.send(ToolReturned(run.id, "a: the first letter", now=2.0))
    first, *rest = loop.state.events
    assert type(first) is Started
    old = [msgspec.structs.replace(first, tools=()), *rest]
    assert Loop.replay(spec, old).outstanding_commands() == loop.outstanding_commands()


def test_the_cache_key_does_not_depend_on_where_the_tools_came_from() -> None:
    by_start = Loop(LoopSpec()).start("hi", 0.0, (LOOKUP,))
    by_spec = Loop(LoopSpec(tools=(LOOKUP,))).start("hi", 0.0)
    assert by_start == by_spec
