"""Forks: a run cut at any event, one thing changed, the rest served from the parent's log."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import (
    Approved,
    Cancelled,
    Guards,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelRequest,
    RunTool,
    Started,
    ToolOutcome,
    ToolReturned,
    ToolSpec,
    tool,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import (
    Edit,
    Journal,
    ParentChanged,
    Run,
    ScriptedModel,
    ToolRunner,
    fork,
    sync,
    transcript,
)
from turnstile.executors.testing import replay, run_async
from turnstile.providers.replay import RecordedTools, load_trace

from .test_session import ScriptedIO

FIXTURES = sorted((Path(__file__).resolve().parents[2] / "fixtures").glob("*/*.json"))
_encode = msgspec.json.encode


class Untouchable:
    """A model and tools that fail the test if anything asks them."""

    def complete(self, request: ModelRequest, **_: Any) -> ModelResponse:
        raise AssertionError("the fork asked the model again")

    async def acomplete(self, request: ModelRequest, **_: Any) -> ModelResponse:
        raise AssertionError("the fork asked the model again")


class Counted:
    """A tool runner that counts each call it runs (its side effects), answering as `inner`."""

    def __init__(self, inner: ToolRunner) -> None:
        self.inner = inner
        self.specs = inner.specs
        self.ran: list[str] = []

    def run(self, call: RunTool, deps: Any = None) -> ToolOutcome:
        self.ran.append(call.id)
        return self.inner.run(call, deps)


def _continued(executor: str, spec: LoopSpec, loop: Loop, tools: ToolRunner) -> Run:
    if executor == "session":  # a runtime of one's own, over the sans-IO `Session`
        io = ScriptedIO(Untouchable().complete, tools)
        return io.drive(io.session(spec, loop=loop))
    if executor == "sync":
        return sync.run(spec, loop=loop, model=Untouchable(), tools=tools, clock=lambda: 0.0)
    from turnstile.executors import aio

    go = functools.partial(aio.run, spec, loop=loop, model=Untouchable(), tools=tools)
    return run_async(go, backend=executor)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize(
    ("parent", "child"),
    [
        ("sync", "sync"),
        ("asyncio", "sync"),
        ("sync", "asyncio"),
        ("sync", "trio"),
        ("sync", "session"),
    ],
)
def test_a_fork_at_every_event_with_nothing_changed_records_the_parents_events_byte_for_byte(
    path: Path, parent: str, child: str
) -> None:
    trace = load_trace(path)
    run = replay(trace, executor=parent)  # type: ignore[arg-type]
    events = run.state.events
    expected = [_encode(e) for e in events]
    for at in range(len(events) + 1):
        tools = Counted(RecordedTools(trace))
        forked = fork(run.loop, at)
        again = _continued(child, run.loop.spec, forked, tools)
        assert [_encode(e) for e in again.state.events] == expected, f"forked at {at}"
        assert tools.ran == []
        assert again.stop_reason == run.stop_reason


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_forks_journal_at_every_event_resumes_to_the_parents_events_byte_for_byte(
    path: Path, tmp_path: Path
) -> None:
    trace = load_trace(path)
    run = replay(trace)
    parent = tmp_path / "parent.journal"
    with Journal(parent, fsync="never") as journal:
        for event in run.state.events:
            journal.append(event)
    for at in range(len(run.state.events) + 1):
        branch = tmp_path / f"branch-{at}.journal"
        fork(parent, at, journal=branch)
        tools = Counted(RecordedTools(trace))
        sync.run(run.loop.spec, model=Untouchable(), tools=tools, journal=branch)
        assert Journal.read(branch) == run.state.events, f"forked at {at}"
        assert tools.ran == []


# -- a run of our own: three turns of one call each ---------------------------------------------


def _calls(*cities: str) -> list[ModelResponse]:
    replies = [
        ModelResponse([ToolCall(f"c{i}", "weather", {"city": c})], ModelStop.tool_use, Usage(5, 1))
        for i, c in enumerate(cities, 1)
    ]
    return [*replies, ModelResponse([Text("done")], ModelStop.end_turn, Usage(5, 1))]


class Weather:
    """A `weather` tool that counts its runs."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool(replay_safe=True)
        def weather(city: str) -> str:
            """The weather in a city."""
            self.ran.append(city)
            return f"sunny in {city}"

        self.tool = weather


def _parent(tmp_path: Path | None = None) -> tuple[Run, Weather]:
    weather = Weather()
    journal = None if tmp_path is None else tmp_path / "parent.journal"
    run = sync.run(
        LoopSpec(),
        "weather in three cities?",
        model=ScriptedModel(_calls("Oslo", "Rome", "Lima")),
        tools=[weather.tool],
        clock=lambda: 0.0,
        journal=journal,
    )
    weather.ran.clear()
    return run, weather


def test_a_changed_tool_result_never_runs_the_tools_before_it_again() -> None:
    run, weather = _parent()
    model = ScriptedModel(_calls("Kyiv")[:1] + _calls()[-1:])
    forked = fork(run.loop, results={"c2": "hail in Rome"})
    again = sync.run(LoopSpec(), loop=forked, model=model, tools=[weather.tool], clock=lambda: 0.0)
    assert weather.ran == ["Kyiv"]  # Oslo and Rome never ran again; after the change, live
    assert [r.content for r in again.state.events if type(r) is ToolReturned] == [
        "sunny in Oslo",
        "hail in Rome",
        "sunny in Kyiv",
    ]
    assert len(model.requests) == 2  # the model is asked from the changed result on


def test_a_fork_at_a_turn_serves_the_recorded_calls_until_the_change() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:1", results={"c3": "fog in Lima"})
    model = ScriptedModel(_calls()[-1:])
    again = sync.run(LoopSpec(), loop=forked, model=model, tools=[weather.tool], clock=lambda: 0.0)
    assert weather.ran == []
    assert again.state.messages[-2].results[0].content == "fog in Lima"  # type: ignore[union-attr]
    assert len(model.requests) == 1
    assert forked.served == ["c1", "c2"]
    shown = transcript(again.state, served=forked.served)
    assert "← weather (recorded): sunny in Rome" in shown
    assert "← weather: fog in Lima" in shown


def test_a_fork_with_another_model_asks_it_and_serves_only_equal_calls_before_diverging() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:2", model="other-model")
    model = ScriptedModel(_calls("Oslo", "Rome", "Lima")[1:])  # the same replies, asked again
    again = sync.run(LoopSpec(), loop=forked, model=model, tools=[weather.tool], clock=lambda: 0.0)
    assert [r.model for r in model.requests] == ["other-model", "other-model", "other-model"]
    assert weather.ran == []  # the replies equal the parent's: the calls are its
    assert again.state.messages == run.state.messages


def test_replay_safe_tools_run_again_under_that_policy() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:2", policy="replay_safe")
    sync.run(LoopSpec(), loop=forked, model=Untouchable(), tools=[weather.tool], clock=lambda: 0.0)
    assert weather.ran == ["Rome", "Lima"]


def test_a_function_policy_is_asked_per_call() -> None:
    run, weather = _parent()
    asked: list[tuple[str, object]] = []

    def ask(call: RunTool, recorded: ToolReturned) -> bool:
        asked.append((call.id, recorded.content))
        return call.id != "c3"

    forked = fork(run.loop, "turn:2", policy=ask)
    sync.run(LoopSpec(), loop=forked, model=Untouchable(), tools=[weather.tool], clock=lambda: 0.0)
    assert asked == [("c2", "sunny in Rome"), ("c3", "sunny in Lima")]
    assert weather.ran == ["Lima"]


def test_a_new_prompt_mid_run_cancels_there_and_goes_on_as_a_new_run() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:2", prompt="only Oslo, please")
    model = ScriptedModel(_calls()[-1:])
    again = sync.run(LoopSpec(), loop=forked, model=model, tools=[weather.tool], clock=lambda: 0.0)
    kinds = [type(e) for e in again.state.events]
    assert kinds[4:] == [Cancelled, Started, type(run.state.events[-1])]
    assert again.state.events[5].messages[0].content == "only Oslo, please"  # type: ignore[attr-defined]
    assert weather.ran == []


def test_a_new_prompt_at_the_start_replaces_the_runs_prompt() -> None:
    run, _ = _parent()
    forked = fork(run.loop, 0, prompt="weather in Paris?")
    assert forked.state.messages[0].content == "weather in Paris?"  # type: ignore[union-attr]
    assert forked.state.phase == "awaiting_model"


def test_a_point_the_run_does_not_have_is_a_value_error() -> None:
    run, _ = _parent()
    for at in ("turn:9", "call:nope", 99, "sideways", "turn:0"):
        with pytest.raises(ValueError):
            fork(run.loop, at)
    with pytest.raises(ValueError, match="say where"):
        fork(run.loop)
    with pytest.raises(ValueError, match="before the fork point"):
        fork(run.loop, "turn:3", results={"c1": "too late"})


def test_a_fork_from_a_dump_needs_its_spec_and_folds_the_same() -> None:
    run, _ = _parent()
    with pytest.raises(ValueError, match="spec"):
        fork(run.loop.dump(), 3)
    assert fork(run.loop.dump(), 3, spec=run.loop.spec).dump() == fork(run.loop, 3).dump()


# -- journals -------------------------------------------------------------------------------------


def test_a_forks_journal_names_its_parent_and_continues_served(tmp_path: Path) -> None:
    run, weather = _parent(tmp_path)
    branch = tmp_path / "branch.journal"
    assert fork(tmp_path / "parent.journal", "turn:2", journal=branch) is None
    with Journal(branch) as journal:
        assert journal.events == run.state.events[:4]
        assert journal.header is not None
        header = msgspec.json.decode(journal.header)
    assert header["path"] == "parent.journal" and header["index"] == 4
    again = sync.run(
        LoopSpec(), model=Untouchable(), tools=[weather.tool], clock=lambda: 0.0, journal=branch
    )
    assert weather.ran == []
    assert again.state.events == run.state.events
    assert Journal.read(branch) == run.state.events


def test_a_fork_is_never_written_over_its_parent(tmp_path: Path) -> None:
    run, _ = _parent(tmp_path)
    with pytest.raises(ValueError, match="over its parent"):
        fork(tmp_path / "parent.journal", 2, journal=tmp_path / "parent.journal")
    assert Journal.read(tmp_path / "parent.journal") == run.state.events


def test_a_journal_without_a_parent_is_written_as_before(tmp_path: Path) -> None:
    _parent(tmp_path)
    data = (tmp_path / "parent.journal").read_bytes()
    assert data[18:22] == b"\x01\x00\x00\x00"  # schema 1, no header record


def test_a_parent_changed_since_the_fork_is_refused(tmp_path: Path) -> None:
    _, weather = _parent(tmp_path)
    branch = tmp_path / "branch.journal"
    fork(tmp_path / "parent.journal", "turn:2", journal=branch)
    parent = tmp_path / "parent.journal"
    parent.unlink()  # written again, by another run
    sync.run(LoopSpec(), "hi", model=ScriptedModel(_calls()), journal=parent, clock=lambda: 1.0)
    go: Callable[[], Run] = lambda: sync.run(  # noqa: E731
        LoopSpec(), model=Untouchable(), tools=[weather.tool], journal=branch
    )
    with pytest.raises(ParentChanged, match="changed since"):
        go()
    parent.unlink()
    with pytest.raises(ParentChanged, match="is gone"):
        go()


def test_a_fork_of_a_loop_into_a_journal_runs_live_on_resume(tmp_path: Path) -> None:
    run, weather = _parent()
    branch = tmp_path / "branch.journal"
    fork(run.loop, "turn:3", journal=branch)
    model = ScriptedModel(_calls("Lima", "Bern")[1:])
    sync.run(LoopSpec(), model=model, tools=[weather.tool], clock=lambda: 0.0, journal=branch)
    assert weather.ran == ["Bern"]  # no parent journal to serve from: all live


def test_a_fork_of_a_fork_serves_from_the_fork(tmp_path: Path) -> None:
    run, weather = _parent(tmp_path)
    first, second = tmp_path / "first.journal", tmp_path / "second.journal"
    fork(tmp_path / "parent.journal", "turn:2", journal=first)
    sync.run(
        LoopSpec(), model=Untouchable(), tools=[weather.tool], clock=lambda: 0.0, journal=first
    )
    fork(first, "turn:3", journal=second)
    again = sync.run(
        LoopSpec(), model=Untouchable(), tools=[weather.tool], clock=lambda: 0.0, journal=second
    )
    assert weather.ran == []
    assert again.state.events == run.state.events


def _deleting(deleted: list[str], journal: Path | None = None) -> tuple[Run, Any]:
    """A run whose call d1 of a tool that needs approval was approved, and the tool."""

    @tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    reply = ModelResponse([ToolCall("d1", "delete", {"path": "/tmp/x"})], ModelStop.tool_use)
    done = ModelResponse([Text("done")], ModelStop.end_turn)
    model = ScriptedModel([reply, done])
    run = sync.run(LoopSpec(), "clean up", model=model, tools=[delete], journal=journal,
                   approve=lambda call: True, clock=lambda: 0.0)  # fmt: skip
    deleted.clear()
    return run, delete


def test_an_approvals_recorded_answer_is_served_and_a_changed_one_given() -> None:
    deleted: list[str] = []
    run, delete = _deleting(deleted)
    done = ModelResponse([Text("done")], ModelStop.end_turn)
    served = fork(run.loop, 1)
    again = sync.run(
        LoopSpec(), loop=served, model=Untouchable(), tools=[delete], clock=lambda: 0.0
    )
    assert again.state.events == run.state.events and deleted == []  # nobody asked again
    denied = fork(run.loop, 1, approvals={"d1": "not that one"})
    model = ScriptedModel([done])
    again = sync.run(LoopSpec(), loop=denied, model=model, tools=[delete], clock=lambda: 0.0)
    assert deleted == [] and len(model.requests) == 1
    assert "not that one" in again.state.messages[-2].results[0].content  # type: ignore[union-attr]


def test_an_edited_answer_at_the_fork_point_runs_the_call_with_its_arguments(
    tmp_path: Path,
) -> None:
    deleted: list[str] = []
    run, delete = _deleting(deleted, tmp_path / "run.journal")
    done = ModelResponse([Text("done")], ModelStop.end_turn)
    edited = fork(run.loop, approvals={"d1": Edit({"path": "/tmp/y"})})
    again = sync.run(LoopSpec(), loop=edited, model=ScriptedModel([done]), tools=[delete])
    assert deleted == ["/tmp/y"] and again.stop_reason == "completed"
    [approved] = [e for e in again.state.events if type(e) is Approved]
    assert approved.arguments == {"path": "/tmp/y"}
    fork(tmp_path / "run.journal", approvals={"d1": Edit({"path": "/tmp/z"})},
         journal=tmp_path / "fork.journal")  # fmt: skip
    again = sync.run(LoopSpec(), journal=tmp_path / "fork.journal", model=ScriptedModel([done]),
                     tools=[delete])  # fmt: skip
    assert deleted == ["/tmp/y", "/tmp/z"] and again.stop_reason == "completed"


def test_an_edited_answer_that_does_not_fit_the_tool_s_schema_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    deleted: list[str] = []
    run, _ = _deleting(deleted, tmp_path / "run.journal")
    bad = {"d1": Edit({"path": 7})}
    with pytest.raises(InvalidObservation, match=r"delete \(d1\) do not fit") as refused:
        fork(run.loop, approvals=bad)
    assert refused.value.path == "arguments.path"
    with pytest.raises(InvalidObservation, match="expected string"):
        fork(tmp_path / "run.journal", approvals=bad, journal=tmp_path / "fork.journal")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.journal"]


def test_an_answer_that_is_no_decision_is_a_type_error_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Arguments given bare (as Temporal's `answer(edit=)` takes them) are no `Edit`."""
    _deleting([], tmp_path / "run.journal")
    with pytest.raises(TypeError, match=r"approvals\['d1'\] is True, False, a reason"):
        fork(tmp_path / "run.journal", approvals={"d1": {"path": "/tmp/y"}},  # type: ignore[dict-item]
             journal=tmp_path / "fork.journal")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.journal"]


def test_an_edit_checked_against_a_spec_without_its_tool_says_so() -> None:
    deleted: list[str] = []
    run, _ = _deleting(deleted)
    with pytest.raises(ValueError, match="the spec given has no tool 'delete'"):
        other = LoopSpec(tools=(ToolSpec("add"),))
        fork(run.loop, approvals={"d1": Edit({"path": "/tmp/y"})}, spec=other)


def test_a_change_fork_does_not_know_is_a_type_error() -> None:
    run, _ = _parent()
    with pytest.raises(TypeError, match="colour"):
        fork(run.loop, 1, colour="blue")  # type: ignore[call-overload]


def test_other_system_instructions_are_asked_live_from_the_fork_point() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:3", system="Answer in one word.")
    model = ScriptedModel(_calls()[-1:])
    sync.run(LoopSpec(), loop=forked, model=model, tools=[weather.tool], clock=lambda: 0.0)
    assert [r.system for r in model.requests] == ["Answer in one word."]
    assert weather.ran == []  # the calls before the point are the fork's past


def test_a_fork_run_under_another_spec_serves_while_its_requests_are_the_parents() -> None:
    run, weather = _parent()
    forked = fork(run.loop, "turn:2")
    tighter = LoopSpec(guards=Guards(max_turns=2))  # the same requests, a tighter guard
    again = sync.run(tighter, loop=forked, model=Untouchable(), tools=[weather.tool])
    assert weather.ran == [] and again.stop_reason == "max_turns"


def test_a_fork_carried_to_another_process_serves_the_same() -> None:
    from turnstile.executors._served import carried_on

    run, weather = _parent()
    forked = fork(run.loop, "turn:2", results={"c3": "fog in Lima"})
    moved = carried_on(Loop.load(run.loop.spec, forked.dump()), forked.recorded.carried())
    model = ScriptedModel(_calls()[-1:])
    again = sync.run(LoopSpec(), loop=moved, model=model, tools=[weather.tool], clock=lambda: 0.0)
    assert weather.ran == [] and moved.served == ["c2"] and len(model.requests) == 1
    assert again.state.messages[-2].results[0].content == "fog in Lima"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="function"):
        fork(run.loop, 1, policy=lambda call, recorded: True).recorded.carried()
