"""Runs that survive their process: every event journaled as the loop records it, the intent to
run a call made durable before the call runs, and a run taken over from its journal (or a dump)
by a new process, which tells the loop it `Resumed`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from turnstile.core import (
    Approved,
    Event,
    Loop,
    LoopSpec,
    ModelReplied,
    ModelRequest,
    Resumed,
    StopReason,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolReturned,
    ToolSpec,
    ToolStarted,
    tool,
)
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
    Usage,
    validate_history,
)
from turnstile.executors import Journal, Run, ScriptedModel, Toolbox, sync, transcript
from turnstile.executors import aio as trio_executor
from turnstile.executors.testing import run_async

from . import cli_agents


class Crash(BaseException):
    """The process dies here: nothing after it runs (no tool catches a BaseException)."""


class World:
    """Tools with effects on a shared list, each call's effect recorded under its call id;
    `crash` names the calls that kill the process once, right after their effect."""

    def __init__(self, crash: Iterable[str] = ()) -> None:
        self.effects: list[str] = []
        self.crash = set(crash)

        def effect(context: ToolContext) -> None:
            self.effects.append(context.call_id)
            if context.call_id in self.crash:
                self.crash.discard(context.call_id)
                raise Crash(context.call_id)

        @tool
        def pay(amount: int, context: ToolContext) -> str:
            """Pay once: running it twice pays twice."""
            effect(context)
            return f"paid {amount}"

        @tool(replay_safe=True)
        def read(path: str, context: ToolContext) -> str:
            """Read a file: harmless to run again."""
            effect(context)
            return f"read {path}"

        self.tools: list[Tool] = [pay, read]

    def runs(self, call_id: str) -> int:
        return self.effects.count(call_id)


def pay(call_id: str, amount: int = 5) -> ToolCall:
    return ToolCall(call_id, "pay", {"amount": amount})


def read(call_id: str) -> ToolCall:
    return ToolCall(call_id, "read", {"path": f"/{call_id}"})


def agent(*turns: list[ToolCall]) -> ScriptedModel:
    """A model that makes the calls of turn N once it has N rounds of results, then answers;
    decided from the request alone, so a run another process takes over goes on the same."""

    def reply(request: ModelRequest) -> ModelResponse:
        done = sum(type(m) is ToolResults for m in request.messages)
        if done < len(turns):
            return ModelResponse(list(turns[done]), ModelStop.tool_use, Usage(1, 1))
        return ModelResponse([Text("all done")], ModelStop.end_turn, Usage(1, 1))

    return ScriptedModel(reply)


def results(run: Run) -> dict[str, str]:
    return {r.call_id: r.content for m in run.messages if type(m) is ToolResults for r in m.results}


def kinds(events: Iterable[Event]) -> list[str]:
    shown = []
    for e in events:
        name = type(e).__name__
        call_id = getattr(e, "call_id", None)
        shown.append(name if call_id is None else f"{name} {call_id}")
    return shown


EXECUTORS = ["sync", "asyncio", "trio"]


def drive(
    executor: str, spec: LoopSpec, prompt: str | None = None, *, mock: bool = False, **kwargs: Any
) -> Run:
    """Run under `executor`; `mock` puts trio on a mock clock (for runs with only async tools: a
    worker thread counts as idle to it, so the clock would jump to the deadline)."""
    if executor == "sync":
        return sync.run(spec, prompt, **kwargs)

    async def main() -> Run:
        return await trio_executor.run(spec, prompt, **kwargs)

    if executor == "asyncio":
        return run_async(main) if mock else anyio.run(main)
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0) if mock else None)


# -- every event journaled, each shown once recorded ----------------------------------------


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_journaled_run_writes_every_event_and_shows_each_once_written(
    executor: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.journal"
    world = World()
    seen: list[Event] = []

    def on_event(event: Event) -> None:
        assert Journal.read(path)[-1] == event  # on the journal before anyone sees it
        seen.append(event)

    model = agent([pay("p1"), read("r1")])
    run = drive(
        executor, LoopSpec(), "go", model=model, tools=world.tools, journal=path, on_event=on_event
    )
    assert run.stop_reason is StopReason.completed
    assert Journal.read(path) == run.state.events == seen
    assert sorted(kinds(seen)[2:6]) == [
        "ToolReturned p1",
        "ToolReturned r1",
        "ToolStarted p1",
        "ToolStarted r1",
    ]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_intent_is_durable_before_each_effect(executor: str, tmp_path: Path) -> None:
    """A call's `ToolStarted`, and everything before a model call, is committed first."""
    order: list[str] = []

    class Watched(Journal):
        def append(self, event: Event) -> None:
            super().append(event)
            order.append(" ".join(kinds([event])))

        def commit(self) -> None:
            super().commit()
            order.append("commit")

    @tool(name="pay")
    def watched_pay(amount: int, context: ToolContext) -> str:
        """Pay."""
        order.append(f"run {context.call_id}")
        return "paid"

    model = agent([ToolCall("p", "pay", {"amount": 1})])
    asks = model.complete

    def ask(request: ModelRequest) -> ModelResponse:
        order.append("ask")
        return asks(request)

    model.complete = ask  # type: ignore[method-assign]
    with Watched(tmp_path / "run.journal", fsync="batch") as journal:
        drive(executor, LoopSpec(), "go", model=model, tools=[watched_pay], journal=journal)
    ran = order.index("run p")
    assert order[ran - 2 : ran] == ["ToolStarted p", "commit"]
    assert order.count("ask") == 2
    assert all(order[i - 1] == "commit" for i, step in enumerate(order) if step == "ask")


def test_the_sync_executor_starts_the_calls_of_a_batch_one_at_a_time(tmp_path: Path) -> None:
    world = World()
    seen: list[str] = []
    sync.run(
        LoopSpec(),
        "go",
        model=agent([pay("a"), pay("b"), pay("c")]),
        tools=world.tools,
        journal=tmp_path / "j",
        on_event=lambda e: seen.append(" ".join(kinds([e]))),
    )
    assert seen[2:8] == [
        "ToolStarted a",
        "ToolReturned a",
        "ToolStarted b",
        "ToolReturned b",
        "ToolStarted c",
        "ToolReturned c",
    ]


# -- a crash, and the run taken over --------------------------------------------------------


def test_after_a_crash_the_journal_resumes_the_run_and_nothing_runs_twice_unless_safe(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.journal"
    world = World(crash={"b"})
    model = agent([pay("a"), pay("b"), read("r")])
    with pytest.raises(Crash):
        sync.run(LoopSpec(), "go", model=model, tools=world.tools, journal=path)
    assert kinds(Journal.read(path))[-1] == "ToolStarted b"

    run = sync.run(LoopSpec(), model=model, tools=world.tools, journal=path)
    assert run.stop_reason is StopReason.completed
    assert [world.runs(c) for c in "abr"] == [1, 1, 1]  # r had never started: it simply runs
    got = results(run)
    assert got["a"] == "paid 5" and got["r"] == "read /r"
    assert got["b"].startswith("interrupted") and "may or may not" in got["b"]
    assert "Resumed" in kinds(run.state.events)
    assert Journal.read(path) == run.state.events
    assert Loop.replay(run.loop.spec, Journal.read(path)).dump() == run.loop.dump()
    validate_history(run.messages)


def test_a_replay_safe_call_the_crash_interrupted_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    world = World(crash={"r"})
    model = agent([read("r"), pay("a")])
    with pytest.raises(Crash):
        sync.run(LoopSpec(), "go", model=model, tools=world.tools, journal=path)
    run = sync.run(LoopSpec(), "go", model=model, tools=world.tools, journal=path)
    assert (world.runs("r"), world.runs("a")) == (2, 1)
    assert results(run)["r"] == "read /r"


def test_the_trio_executor_resumes_from_its_journal(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    effects: list[str] = []

    @tool(name="pay")
    async def apay(amount: int, context: ToolContext) -> str:
        """Pay after `amount` tenths of a second; pays and crashes for 3."""
        await trio.sleep(amount / 10)
        effects.append(context.call_id)
        if amount == 3 and effects.count(context.call_id) == 1:
            raise Crash
        return f"paid {amount}"

    @tool(name="read", replay_safe=True)
    async def aread(path: str, context: ToolContext) -> str:
        """Read, slowly."""
        await trio.sleep(1.0)
        effects.append(context.call_id)
        return f"read {path}"

    model = agent([pay("quick", 1), pay("dies", 3), read("slow")])
    with pytest.raises(BaseExceptionGroup) as crashed:
        drive("trio", LoopSpec(), "go", model=model, tools=[apay, aread], journal=path, mock=True)
    assert crashed.group_contains(Crash)
    assert effects == ["quick", "dies"]  # slow was cancelled mid-call

    run = drive("trio", LoopSpec(), model=model, tools=[apay, aread], journal=path, mock=True)
    assert run.stop_reason is StopReason.completed
    assert effects == ["quick", "dies", "slow"]
    got = results(run)
    assert got["quick"] == "paid 1" and got["slow"] == "read /slow"
    assert got["dies"].startswith("interrupted")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_model_call_that_got_no_reply_is_asked_again(executor: str, tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    asked: list[int] = []

    def reply(request: ModelRequest) -> ModelResponse:
        asked.append(len(request.messages))
        if len(asked) == 1:
            raise Crash
        return ModelResponse([Text("hello")], ModelStop.end_turn, Usage(1, 1))

    with pytest.raises(BaseException) as crashed:
        drive(executor, LoopSpec(), "hi", model=ScriptedModel(reply), journal=path)
    assert crashed.type is Crash or crashed.group_contains(Crash)  # type: ignore[union-attr]
    run = drive(executor, LoopSpec(), "hi", model=ScriptedModel(reply), journal=path)
    assert run.output == "hello" and asked == [1, 1]
    assert kinds(run.state.events) == ["Started", "Resumed", "ModelReplied"]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_finished_journal_gives_its_run_back_without_running_anything(
    executor: str, tmp_path: Path
) -> None:
    path = tmp_path / "run.journal"
    world = World()
    first = drive(
        executor, LoopSpec(), "go", model=agent([pay("a")]), tools=world.tools, journal=path
    )
    again = drive(
        executor, LoopSpec(), "go", model=ScriptedModel([]), tools=world.tools, journal=path
    )
    assert again.finish is not None and again.stop_reason is StopReason.completed
    assert again.messages == first.messages and world.runs("a") == 1
    assert Journal.read(path) == first.state.events


def test_a_journal_resumes_only_the_run_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    world = World(crash={"a"})
    model = agent([pay("a")])
    with pytest.raises(Crash):
        sync.run(LoopSpec(), "go", model=model, tools=world.tools, journal=path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="the journal holds a run started from another prompt"):
        sync.run(LoopSpec(), "something else", model=model, tools=world.tools, journal=path)
    assert path.read_bytes() == before


def test_an_empty_journal_needs_a_prompt(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a prompt"):
        sync.run(LoopSpec(), model=ScriptedModel([]), journal=tmp_path / "new.journal")


def test_a_loop_and_a_journal_are_two_sources_for_one_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loop= or journal="):
        sync.run(LoopSpec(), model=ScriptedModel([]), loop=Loop(LoopSpec()), journal=tmp_path / "j")


def test_a_journal_given_open_is_left_open(tmp_path: Path) -> None:
    world = World()
    with Journal(tmp_path / "j") as journal:
        sync.run(LoopSpec(), "go", model=agent([pay("a")]), tools=world.tools, journal=journal)
        journal.append(Resumed(now=journal.events[-1].now))  # still open: the caller closes it


def test_a_dump_taken_when_a_call_starts_resumes_without_running_it_again() -> None:
    """`on_event` sees the state as the loop recorded it: a dump taken there is never behind."""
    world = World(crash={"a"})
    dumps: list[bytes] = []
    loop = Loop(LoopSpec())

    def keep(event: Event) -> None:
        if type(event) is ToolStarted:
            dumps.append(loop.dump())

    with pytest.raises(Crash):
        sync.run(
            LoopSpec(), "go", model=agent([pay("a")]), tools=world.tools, loop=loop, on_event=keep
        )
    resumed = Loop.load(loop.spec, dumps[-1])
    run = sync.run(LoopSpec(), model=agent([pay("a")]), tools=world.tools, loop=resumed)
    assert world.runs("a") == 1 and results(run)["a"].startswith("interrupted")
    assert "Resumed" in kinds(run.state.events)


def saved_in_on_step(executor: str, crash_at: int, turns: tuple[list[ToolCall], ...]) -> World:
    """Run, dumping the state in every `on_step`, killed just before the step after the
    `crash_at`-th could save its dump; then resume from the last dump in a new executor."""
    world = World()
    loop = Loop(LoopSpec())
    dumps: list[bytes] = []

    def keep(_: object) -> None:
        if len(dumps) == crash_at:
            raise Crash(crash_at)
        dumps.append(loop.dump())

    with pytest.raises((Crash, BaseExceptionGroup)):
        drive(
            executor,
            LoopSpec(),
            "go",
            model=agent(*turns),
            tools=world.tools,
            loop=loop,
            on_step=keep,
        )
    resumed = Loop.load(loop.spec, dumps[-1])
    run = drive(executor, LoopSpec(), model=agent(*turns), tools=world.tools, loop=resumed)
    assert run.stop_reason is StopReason.completed
    return world


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_dump_taken_in_on_step_resumes_without_running_a_call_twice(executor: str) -> None:
    """`on_step` hands out commands only at crash-consistent points: whichever step a dump
    was taken at, a process killed before the next step and resumed from that dump runs no
    call twice that is not replay-safe."""
    turns = ([pay("a"), pay("b"), read("r")], [pay("c")])
    steps: list[object] = []
    drive(
        executor, LoopSpec(), "go", model=agent(*turns), tools=World().tools, on_step=steps.append
    )
    for crash_at in range(1, len(steps)):
        world = saved_in_on_step(executor, crash_at, turns)
        assert all(world.runs(c) <= 1 for c in "abc"), (crash_at, world.effects)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_dump_taken_when_on_step_sees_a_result_holds_it(executor: str) -> None:
    loop = Loop(LoopSpec())
    held: list[bool] = []

    def keep(step: object) -> None:
        if type(step) is ToolReturned:
            held.append(step in Loop.load(loop.spec, loop.dump()).state.events)

    drive(
        executor,
        LoopSpec(),
        "go",
        model=agent([pay("a"), read("r")]),
        tools=World().tools,
        loop=loop,
        on_step=keep,
    )
    assert held == [True, True]


# -- a tool knows its call id -----------------------------------------------------------------


@tool
def whoami(context: ToolContext) -> str:
    """Say the call's id."""
    return context.call_id


@tool
async def awhoami(context: ToolContext) -> str:
    """Say the call's id, asynchronously."""
    return context.call_id


def test_every_call_gets_its_call_id() -> None:
    run = sync.run(LoopSpec(), "who?", model=agent([ToolCall("x1", "whoami", {})]), tools=[whoami])
    assert results(run) == {"x1": "x1"}
    model = agent([ToolCall("x1", "whoami", {}), ToolCall("x2", "awhoami", {})])
    run = drive("trio", LoopSpec(), "who?", model=model, tools=[whoami, awhoami])
    assert results(run) == {"x1": "x1", "x2": "x2"}
    assert Toolbox([whoami]).run("whoami", {}, context=ToolContext("k")).content == "k"


class OldRunner:
    """A runner written before calls had a context: `run(name, arguments)`."""

    specs = (ToolSpec("echo"),)

    def __init__(self) -> None:
        self.called: list[dict[str, Any]] = []

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        self.called.append(arguments)
        return ToolOutcome("echoed")


class NewRunner(OldRunner):
    def run(  # type: ignore[override]
        self, name: str, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> ToolOutcome:
        self.called.append({"id": None if context is None else context.call_id})
        return ToolOutcome("echoed")


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("runner", [OldRunner, NewRunner])
def test_a_runner_gets_the_context_if_its_run_takes_one(
    executor: str, runner: Callable[[], OldRunner]
) -> None:
    given = runner()
    run = drive(
        executor, LoopSpec(), "go", model=agent([ToolCall("e", "echo", {"v": 1})]), tools=given
    )
    assert run.stop_reason is StopReason.completed
    assert given.called == ([{"v": 1}] if type(given) is OldRunner else [{"id": "e"}])


def test_the_events_a_model_reply_brings_are_journaled_before_its_calls_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"
    world = World(crash={"a"})
    with pytest.raises(Crash):
        sync.run(LoopSpec(), "go", model=agent([pay("a")]), tools=world.tools, journal=path)
    replied = [e for e in Journal.read(path) if type(e) is ModelReplied]
    assert len(replied) == 1 and replied[0].response.content[0].id == "a"  # type: ignore[union-attr]
    assert type(Journal.read(path)[-1]) is ToolStarted


def test_a_tool_result_written_by_a_crashed_process_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "j"
    world = World(crash={"b"})
    model = agent([pay("a"), pay("b")])
    with pytest.raises(Crash):
        sync.run(LoopSpec(), "go", model=model, tools=world.tools, journal=path)
    assert ToolReturned in {type(e) for e in Journal.read(path)}
    sync.run(LoopSpec(), model=model, tools=world.tools, journal=path)
    assert world.runs("a") == 1


def test_the_durable_example_shows_each_turn_s_token_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from examples.durable import agent

    monkeypatch.setattr(agent, "LOG", tmp_path / "payments.log")
    run = sync.run(
        agent.SPEC,
        agent.PROMPT,
        model=ScriptedModel(agent.model),
        tools=[agent.pay, agent.balance],
        journal=tmp_path / "run.journal",
    )
    headings = [line for line in run.transcript().splitlines() if line.startswith("──")]
    assert len(headings) == 6 and not any(re.search(r"\b0 in|/ 0 out", h) for h in headings)


_ANSWER_IN_ANOTHER_PROCESS = """
import sys
from turnstile.core import InvalidObservation
from turnstile.executors import Edit, sync
from tests.executors.cli_agents import approved

edit = Edit({"city": sys.argv[2]} if sys.argv[2] != "-" else {"town": "Lyon"})
try:
    run = sync.run(approved, journal=sys.argv[1], approve=lambda call: edit)
except InvalidObservation as e:
    print("refused:", e)
else:
    print(run.stop_reason.value, run.messages[-2].results[0].content)
"""


def _answer_in_another_process(journal: Path, city: str) -> str:
    script = [sys.executable, "-c", _ANSWER_IN_ANOTHER_PROCESS, str(journal), city]
    root = Path(__file__).parent.parent.parent
    return subprocess.run(script, capture_output=True, text=True, check=True, cwd=root).stdout


def test_an_edited_approval_resumes_from_the_journal_in_another_process(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal"
    waiting = sync.run(cli_agents.approved, "Weather?", journal=journal)
    assert [(c.name, c.arguments) for c in waiting.waiting] == [("get_weather", {"city": "Paris"})]
    before = journal.read_bytes()
    refused = _answer_in_another_process(journal, "-")  # an edit that does not fit: refused
    assert refused.startswith("refused: arguments.city: the edited arguments of get_weather (c1)")
    assert journal.read_bytes()[: len(before)] == before
    assert Journal(journal).loop(LoopSpec()).state.phase == "awaiting_approval"  # still asks
    said = _answer_in_another_process(journal, "Lyon")
    assert said.startswith("completed (a person approved this call with its arguments changed")
    assert '"city":"Lyon","temp_c":21' in said  # the call ran as edited
    events = Journal(journal).events
    [approved] = [e for e in events if type(e) is Approved]
    assert approved.arguments == {"city": "Lyon"}
    loop = Journal(journal).loop(LoopSpec())
    assert loop.state.messages[1].content[1].arguments == {"city": "Paris"}  # as the model asked
    shown = transcript(loop.state)
    assert '  → get_weather {"city": "Paris"}' in shown
    assert '  ✓ approved get_weather (c1), edited: {"city": "Lyon"}' in shown
