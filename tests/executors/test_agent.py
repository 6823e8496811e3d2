"""`Agent`: a spec, its model and its tools as one value, which every executor takes in place of
the spec; a model string in it builds its client when the run starts."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import anyio
import msgspec
import pytest
from turnstile.core import (
    Approved,
    AwaitApproval,
    Guards,
    InvalidObservation,
    InvalidSpec,
    LoopSpec,
    ModelRequest,
    Price,
    StopReason,
    ToolContext,
    ToolReturned,
    tool,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults, Usage
from turnstile.executors import (
    Agent,
    ChildApproval,
    Edit,
    Journal,
    ScriptedModel,
    Toolbox,
    aio,
    as_tool,
    invoke,
    sync,
    transcript,
)
from turnstile.executors.temporal import start
from turnstile.executors.temporal._wire import decode_input
from turnstile.executors.testing import run_async
from turnstile.providers import MissingAPIKey
from turnstile.providers.replay import RecordedTools, client_for, load_trace, prompt_for, spec_for

from tests.executors.subagent_world import (
    CHILD,
    KINDS,
    PARENT,
    careful,
    careful_reply,
    execute,
    execute_careful,
    model,
    note,
    publish,
    research,
)
from tests.executors.subagent_world import (
    reply as child_reply,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(
                [ToolCall("c1", "add", {"a": 2, "b": 3})], ModelStop.tool_use, Usage(10, 5)
            ),
            ModelResponse([Text("5")], ModelStop.end_turn, Usage(20, 1)),
        ]
    )


def test_an_agent_runs_as_its_parts_do_in_sync_and_aio() -> None:
    spec = LoopSpec(system="Add.")
    by_parts = sync.run(spec, "2+3?", model=script(), tools=[add])
    agent = Agent(spec, model=script(), tools=[add])
    assert transcript(sync.run(agent, "2+3?").state) == transcript(by_parts.state)
    ran = run_async(lambda: aio.run(Agent(spec, model=script(), tools=[add]), "2+3?"))
    assert transcript(ran.state) == transcript(by_parts.state)
    assert ran.finish is not None and ran.finish.reason is StopReason.completed


def test_aio_updates_take_an_agent() -> None:
    async def updated() -> list[str]:
        agent = Agent(LoopSpec(system="Add."), model=script(), tools=[add])
        async with aio.updates(agent, "2+3?") as stream:
            return [type(update).__name__ async for update in stream]

    seen = run_async(updated)
    assert "ToolCallFinished" in seen and seen[-1] == "RunFinished"


def test_an_agent_is_a_frozen_value() -> None:
    tools = [add]
    agent = Agent(model="openai:gpt-4.1", tools=tools)
    tools.append(add)
    assert agent.tools == (add,) and agent.spec == LoopSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.model = "openai:gpt-5"  # type: ignore[misc]
    box = Toolbox([add])
    assert Agent(model="openai:gpt-4.1", tools=box).tools is box  # a runner stays itself
    with pytest.raises(TypeError, match="takes a LoopSpec, not str"):
        Agent("Add.", model="openai:gpt-4.1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "conflict"),
    [
        ({"model": ScriptedModel([])}, "the agent has its model already: give model= to"),
        ({"tools": [add]}, "the agent has its tools already: give tools= to"),
        (
            {"model": ScriptedModel([]), "tools": [add]},
            "the agent has its model and tools already: give model= and tools= to",
        ),
    ],
)
def test_an_agent_given_its_model_or_tools_again_is_a_type_error(
    given: dict[str, Any], conflict: str
) -> None:
    agent = Agent(model=script(), tools=[add])
    with pytest.raises(TypeError, match=conflict):
        sync.run(agent, "2+3?", **given)
    with pytest.raises(TypeError, match=conflict):
        run_async(lambda: aio.run(agent, "2+3?", **given))


def test_a_spec_without_a_model_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="the run needs a model"):
        sync.run(LoopSpec(), "hi")


def test_a_model_string_is_built_from_the_environment_when_the_run_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = load_trace(FIXTURES / "anthropic/weather.stream.json")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    replays = iter([client_for(trace).sdk, client_for(trace).sdk])
    areplay = client_for(trace, sync=False).sdk
    monkeypatch.setattr(anthropic, "Anthropic", lambda: next(replays))
    monkeypatch.setattr(anthropic, "AsyncAnthropic", lambda: areplay)
    agent = Agent(spec_for(trace), model="anthropic:claude-sonnet-4-5", tools=RecordedTools(trace))
    ran = sync.run(agent, prompt_for(trace))
    assert ran.finish is not None and ran.finish.reason is StopReason.completed
    agent = dataclasses.replace(agent, tools=RecordedTools(trace))
    ran_async = run_async(lambda: aio.run(agent, prompt_for(trace)))
    assert transcript(ran_async.state) == transcript(ran.state)
    # and a string given to the run itself, in place of a client
    again = sync.run(spec_for(trace), prompt_for(trace), model="anthropic:claude-sonnet-4-5",
                     tools=RecordedTools(trace))  # fmt: skip
    assert transcript(again.state) == transcript(ran.state)


def test_a_model_string_whose_key_is_missing_fails_before_the_run_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    journal = tmp_path / "run.journal"
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY is not set"):
        sync.run(Agent(model="openai:gpt-4.1"), "hi", journal=journal)
    assert not journal.exists()
    with pytest.raises(InvalidSpec, match="names no provider"):
        sync.run(Agent(model="gemini:gemini-2.5-pro"), "hi")


class FakeTemporal:
    """Stands for a Temporal client: keeps what a workflow would be started with."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.started.append((args, kwargs))
        return object()


def test_temporal_starts_an_agent_by_its_model_string_with_its_tools_named() -> None:
    client = FakeTemporal()
    agent = Agent(LoopSpec(system="Add."), model="openai:gpt-4.1", tools=[add])
    handle = asyncio.run(start(client, agent, "2+3?", id="run-1"))  # type: ignore[arg-type]
    [(_, kwargs)] = client.started
    given = decode_input(kwargs["args"][0])
    assert given.model == "openai:gpt-4.1" and kwargs["id"] == "run-1"
    assert [t.name for t in given.spec.tools] == ["add"]  # a worker without it refuses the run
    assert given.spec.system == "Add." and handle.spec == given.spec


@pytest.mark.parametrize(
    ("agent", "given", "message"),
    [
        (Agent(model=ScriptedModel([])), {}, "a Temporal run names its model"),
        (Agent(model="openai:gpt-4.1"), {"model": "gpt"}, "the agent has its model already"),
    ],
)
def test_temporal_refuses_an_agent_whose_model_cannot_travel_or_comes_twice(
    agent: Agent, given: dict[str, Any], message: str
) -> None:
    client = FakeTemporal()
    with pytest.raises(TypeError, match=message):
        asyncio.run(start(client, agent, "hi", id="run-1", **given))  # type: ignore[arg-type]
    assert client.started == []


def test_model_strings_in_the_spec_s_models_are_asked_through_clients_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fallback on another provider: each model string of `LoopSpec.models` gets its client
    from the environment, so a run needs no `model=` when all of them are model strings."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    spec = LoopSpec(models=("deepseek:deepseek-reasoner", "anthropic:claude-sonnet-4-5"))
    with pytest.raises(MissingAPIKey, match="DEEPSEEK_API_KEY is not set"):
        sync.run(spec, "hi")  # not "the run needs a model": the fallback's client is built
    with pytest.raises(MissingAPIKey, match="DEEPSEEK_API_KEY is not set"):
        sync.run(spec, "hi", model="anthropic:claude-sonnet-4-5")
    with pytest.raises(TypeError, match="the run needs a model"):
        sync.run(LoopSpec(models=("deepseek:deepseek-reasoner", "gpt-4.1")), "hi")


# -- sub-agents (`as_tool`) -------------------------------------------------------------------


def _counts(folder: Path) -> dict[str, int]:
    side = folder / "side"
    lines = side.read_text().split() if side.exists() else []
    return {q: lines.count(q) for q in ("x", "y")}


def _children(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("run.*.journal"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_sub_agent_runs_a_child_under_the_parents_executor_and_its_cost_counts(
    kind: str, tmp_path: Path
) -> None:
    run = execute(kind, tmp_path, journal=tmp_path / "run.journal")
    assert run.stop_reason is StopReason.completed
    assert run.output == "found: x: noted x / y: noted y"
    assert _counts(tmp_path) == {"x": 1, "y": 1}
    children = [Journal.replay(p, CHILD) for p in _children(tmp_path)]
    assert [p.name for p in _children(tmp_path)] == ["run.1-a1.journal", "run.1-a2.journal"]
    own = Price(input=1.0, output=2.0).of(Usage(3_000, 150))
    assert run.cost == pytest.approx(own + sum(c.state.cost for c in children))
    assert run.usage == Usage(3_000 + 2 * 700, 150 + 2 * 70)
    assert sorted(run.children) == ["a1", "a2"]


def test_the_transcript_nests_each_child_under_its_call(tmp_path: Path) -> None:
    shown = execute("sync", tmp_path).transcript()
    assert '  → research {"prompt": "x"}\n    │ user: x\n    │ ── turn 1' in shown
    assert "    │   ← note: noted x" in shown
    assert "  ← research: x: noted x" in shown


def test_a_child_that_exhausts_the_parents_budget_stops_it_after_its_result(
    tmp_path: Path,
) -> None:
    guards = Guards(max_cost=0.002, finalize=False)
    run = execute("sync", tmp_path, msgspec.structs.replace(PARENT, guards=guards))
    assert run.stop_reason is StopReason.cost_budget
    # the parent's own reply cost 0.0012: the children's 0.00084 each put it over
    assert run.cost == pytest.approx(0.0012 + 2 * 0.00084)
    assert _counts(tmp_path) == {"x": 1, "y": 1}


def test_a_sub_agent_outside_a_run_says_so(tmp_path: Path) -> None:
    outcome = invoke(research, {"prompt": "x"}, ToolContext("c1", str(tmp_path / "side")))
    assert outcome.is_error and "sub-agent" in str(outcome.content)


def test_a_child_that_stops_without_an_answer_is_an_error_result(tmp_path: Path) -> None:
    stuck = as_tool(
        LoopSpec(guards=Guards(max_turns=1, finalize=False)),
        name="research",
        description="Research.",
        tools=[note],
    )
    run = sync.run(PARENT, "go", model=model(), tools=[stuck], deps=str(tmp_path / "side"))
    results = [r for m in run.messages if type(m) is ToolResults for r in m.results]
    assert results[0].is_error and "stopped (max_turns) before its answer" in str(
        results[0].content
    )


@pytest.mark.parametrize("kind", ["sync", "trio"])
def test_a_parent_killed_mid_child_and_resumed_runs_no_child_tool_twice_and_costs_add_up(
    kind: str, tmp_path: Path
) -> None:
    """kill -9 right after every record the children journal, then resume: each child's tool
    ran at most once (once, unless its result says it was interrupted: a call that may or may
    not have run), and the parent's cost
    is its own plus its children's, as in a run never killed."""
    whole = (
        execute(kind, tmp_path / "whole", journal=tmp_path / "whole" / "run.journal")
        if ((tmp_path / "whole").mkdir() is None)
        else None
    )
    assert whole is not None
    records = sum(len(Journal.read(p)) for p in (tmp_path / "whole").glob("run.*.journal"))
    assert records >= 10
    root = Path(__file__).resolve().parents[2]
    for at in range(1, records + 1):
        folder = tmp_path / f"kill{at}"
        folder.mkdir()
        killed = subprocess.run(
            [sys.executable, "-m", "tests.executors.subagent_world", kind, str(folder), str(at)],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        run = execute(kind, folder, journal=folder / "run.journal")
        where = f"killed after child record {at}"
        assert run.stop_reason is StopReason.completed, where
        counts = _counts(folder)
        for child, q in zip(_children(folder), ("x", "y"), strict=True):
            results = [
                r for m in Journal.replay(child, CHILD).state.messages
                if type(m) is ToolResults for r in m.results
            ]  # fmt: skip
            interrupted = "interrupted" in str(results[0].content)
            assert counts[q] == 1 or (interrupted and counts[q] == 0), (where, q, counts)
        children = sum(Journal.replay(p, CHILD).state.cost for p in _children(folder))
        own = Price(input=1.0, output=2.0).of(Usage(3_000, 150))
        assert run.cost == pytest.approx(own + children) == pytest.approx(whole.cost), where


def test_a_child_s_cost_counts_once_when_a_later_call_reuses_its_id(tmp_path: Path) -> None:
    replies = iter(
        [
            ModelResponse([ToolCall("c1", "research", {"prompt": "x"})], ModelStop.tool_use),
            ModelResponse([ToolCall("c1", "note", {"text": "z"})], ModelStop.tool_use),
            ModelResponse([Text("done")], ModelStop.end_turn),
        ]
    )

    def reply(request: ModelRequest) -> ModelResponse:
        return next(replies) if request.system == "parent" else child_reply(request)

    run = sync.run(
        PARENT, "go", model=ScriptedModel(reply), tools=[research, note], deps=str(tmp_path / "s")
    )
    assert run.stop_reason is StopReason.completed
    assert run.cost == pytest.approx(run.children["c1"].cost)  # the parent's replies cost 0
    assert run.transcript().count("    │ user: x") == 1  # under the sub-agent's call only


class _SlowChild:
    """The parent calls `research` once; the child's model never answers in time."""

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        if request.system == "parent":
            call = ToolCall("a1", "research", {"prompt": "x"})
            return ModelResponse([call], ModelStop.tool_use, Usage(1, 1))
        await anyio.sleep(10)
        return ModelResponse([Text("late")], ModelStop.end_turn, Usage(1, 1))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_parent_cancelled_while_its_child_runs_finishes_cancelled(
    backend: Any, tmp_path: Path
) -> None:
    """The child ends cancelled, and the cancel goes on to the parent: its call gets no answer
    from the child, as any call under way when a run is called off."""

    async def cancelled() -> Any:
        with anyio.move_on_after(1):
            journal = tmp_path / "run.journal"
            return await aio.run(PARENT, "go", model=_SlowChild(), tools=[research],
                                 journal=journal)  # fmt: skip

    run = run_async(cancelled, backend=backend)
    assert run.stop_reason is StopReason.cancelled
    [result] = [r for m in run.messages if type(m) is ToolResults for r in m.results]
    assert "cancelled" in str(result.content) and "research stopped" not in str(result.content)
    child = Journal.read(tmp_path / "run.1-a1.journal")
    assert type(child[-1]).__name__ == "Cancelled"


class Question(msgspec.Struct):
    topic: str
    depth: int = 1


class Finding(msgspec.Struct):
    topic: str
    pages: int


def test_a_sub_agent_takes_its_input_type_and_answers_with_its_typed_output() -> None:
    asked: list[str] = []

    def reply(request: ModelRequest) -> ModelResponse:
        if request.system == "parent":
            if len(request.messages) == 1:
                call = ToolCall("q1", "research", {"topic": "caching", "depth": 2})
                return ModelResponse([call], ModelStop.tool_use)
            return ModelResponse([Text("ok")], ModelStop.end_turn)
        asked.append(str(request.messages[0].content))  # type: ignore[union-attr]
        answer = ToolCall("f1", "final_answer", {"topic": "caching", "pages": 3})
        return ModelResponse([answer], ModelStop.tool_use)

    typed = as_tool(
        LoopSpec(system="child", output=Finding), name="research", description="R.", input=Question
    )
    assert typed.spec.parameters["required"] == ["topic"]
    run = sync.run(PARENT, "go", model=ScriptedModel(reply), tools=[typed])
    assert asked == ['{"topic":"caching","depth":2}']
    [result] = [r for m in run.messages if type(m) is ToolResults for r in m.results]
    assert (result.content, result.is_error) == ('{"topic":"caching","pages":3}', False)
    with pytest.raises(TypeError, match="model and tools"):
        as_tool(Agent(CHILD, model=model()), name="r", description="R.", tools=[note])


# -- a sub-agent's approvals -------------------------------------------------------------------


def _published(folder: Path) -> list[str]:
    side = folder / "side"
    return [w for w in side.read_text().split() if w.startswith("published:")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_child_s_approvals_go_to_the_parent_s_approver_saying_which_sub_agent_asks(
    kind: str, tmp_path: Path
) -> None:
    asked: list[AwaitApproval] = []

    def approve(request: AwaitApproval) -> bool:
        asked.append(request)
        return True

    run = execute_careful(kind, tmp_path, journal=tmp_path / "run.journal", approve=approve)
    assert run.stop_reason is StopReason.completed and not run.waiting
    assert run.output == "found: x: noted x / y: noted y"
    assert _counts(tmp_path) == {"x": 1, "y": 1}
    assert sorted(_published(tmp_path)) == ["published:x", "published:y"]
    assert all(type(r) is ChildApproval for r in asked)
    requests = sorted(asked, key=lambda r: r.parent_call)  # type: ignore[attr-defined]
    assert [(r.id, r.name, r.arguments) for r in requests] == [
        ("p1", "publish", {"text": "x"}),
        ("p1", "publish", {"text": "y"}),
    ]
    assert [(r.agent, r.parent_call, r.via) for r in requests] == [  # type: ignore[attr-defined]
        ("research", "a1", (("research", "a1"),)),
        ("research", "a2", (("research", "a2"),)),
    ]
    assert requests[0].tool == publish.spec  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_parent_approver_answers_its_children(backend: Any, tmp_path: Path) -> None:
    asked: list[str] = []

    async def approve(request: ChildApproval) -> bool | str:
        await anyio.sleep(0)
        asked.append(request.parent_call)
        return request.parent_call == "a1" or "not y"

    run = execute_careful(backend, tmp_path, approve=approve)
    assert run.stop_reason is StopReason.completed and sorted(asked) == ["a1", "a2"]
    assert _published(tmp_path) == ["published:x"]  # y's publishing was denied


@pytest.mark.parametrize("kind", KINDS)
def test_a_parent_s_approver_edits_a_child_s_call(kind: str, tmp_path: Path) -> None:
    def approve(request: AwaitApproval) -> Edit:
        return Edit({"text": request.arguments["text"] + "!"})

    run = execute_careful(kind, tmp_path, journal=tmp_path / "run.journal", approve=approve)
    assert run.stop_reason is StopReason.completed
    assert sorted(_published(tmp_path)) == ["published:x!", "published:y!"]
    approved = [e for e in Journal.read(tmp_path / "run.1-a1.journal") if type(e) is Approved]
    assert [e.arguments for e in approved] == [{"text": "x!"}]


def test_an_invalid_edit_of_a_child_s_call_is_refused_and_the_parent_resumes(
    tmp_path: Path,
) -> None:
    """The parent's run raises the loop's refusal, as for a call of its own; resumed, its
    sub-agent's call asks again, and nothing ran twice."""
    journal = tmp_path / "run.journal"
    with pytest.raises(InvalidObservation, match="publish"):
        execute_careful("sync", tmp_path, journal=journal, approve=lambda r: Edit({"text": 7}))
    run = execute_careful("sync", tmp_path, journal=journal, approve=lambda r: True)
    assert run.stop_reason is StopReason.completed
    assert _counts(tmp_path) == {"x": 1, "y": 1}
    assert sorted(_published(tmp_path)) == ["published:x", "published:y"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_refused_edit_of_one_child_s_call_lets_its_sibling_child_finish(
    backend: str, tmp_path: Path
) -> None:
    """Under aio the refusal is raised once the rest in flight is done: the other sub-agent's
    child, still waiting on its approver, finishes rather than being cancelled, so the resumed
    parent takes its answer and nothing runs twice."""

    async def approve(request: AwaitApproval) -> bool | Edit:
        if request.parent_call == "a1":  # type: ignore[attr-defined]
            return Edit({"text": 7})
        await anyio.sleep(0.3)
        return True

    journal = tmp_path / "run.journal"
    with pytest.raises(InvalidObservation, match="publish"):
        execute_careful(backend, tmp_path, journal=journal, approve=approve)
    assert _published(tmp_path) == ["published:y"]
    run = execute_careful(backend, tmp_path, journal=journal, approve=lambda r: True)
    assert run.output == "found: x: noted x / y: noted y"
    assert _counts(tmp_path) == {"x": 1, "y": 1}
    assert sorted(_published(tmp_path)) == ["published:x", "published:y"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_parent_without_an_approver_stops_with_its_children_s_requests_then_resumes_them(
    kind: str, tmp_path: Path
) -> None:
    """The parent stops with its sub-agent calls open and the children's requests in
    `Run.waiting`; resumed from its journal in a fresh session, with an approver, each child
    goes on from where it waited: no child tool runs twice, and the costs add up as in a run
    that never stopped."""
    (tmp_path / "whole").mkdir()
    whole = execute_careful(kind, tmp_path / "whole", approve=lambda r: True)
    journal = tmp_path / "run.journal"
    paused = execute_careful(kind, tmp_path, journal=journal)
    assert paused.finish is None
    waiting = sorted(paused.waiting, key=lambda r: r.parent_call)  # type: ignore[attr-defined]
    assert all(type(r) is ChildApproval for r in waiting)
    assert [(r.id, r.name, r.via) for r in waiting] == [  # type: ignore[attr-defined]
        ("p1", "publish", (("research", "a1"),)),
        ("p1", "publish", (("research", "a2"),)),
    ]
    assert _counts(tmp_path) == {"x": 1, "y": 1} and not _published(tmp_path)
    events = Journal.read(journal)
    assert not [e for e in events if type(e) is ToolReturned]  # the calls are left open
    again = execute_careful(kind, tmp_path, journal=journal)  # still no one to ask
    assert again.finish is None and len(again.waiting) == 2
    run = execute_careful(kind, tmp_path, journal=journal, approve=lambda r: True)
    assert run.stop_reason is StopReason.completed, run
    assert run.output == whole.output
    assert _counts(tmp_path) == {"x": 1, "y": 1}
    assert sorted(_published(tmp_path)) == ["published:x", "published:y"]
    assert run.cost == pytest.approx(whole.cost) and run.usage == whole.usage


def test_a_parent_without_an_approver_or_a_journal_gets_an_error_result_naming_the_wait(
    tmp_path: Path,
) -> None:
    """Without a journal a stopped child could not go on where it waited (it would run its
    tools again): its call gets an error result, as before."""
    run = execute_careful("sync", tmp_path)
    assert run.stop_reason is StopReason.completed
    results = [r for m in run.messages if type(m) is ToolResults for r in m.results]
    assert all(r.is_error and "waits for approval of publish" in str(r.content) for r in results)


def test_a_grandchild_s_request_names_every_sub_agent_call_it_came_through(
    tmp_path: Path,
) -> None:
    """A child that is itself a parent passes its children's requests on up, this call in
    front, whether the top run answers them at once or stops and is resumed."""
    middle = as_tool(LoopSpec(system="middle"), name="delegate", description="D.", tools=[careful])

    def reply(request: ModelRequest) -> ModelResponse:
        results = [r for m in request.messages if type(m) is ToolResults for r in m.results]
        if request.system == "parent":
            if not results:
                return ModelResponse(
                    [ToolCall("a1", "delegate", {"prompt": "x"})], ModelStop.tool_use
                )
            return ModelResponse([Text(f"done: {results[0].content}")], ModelStop.end_turn)
        if request.system == "middle":
            if not results:
                call = ToolCall("b1", "research", {"prompt": request.messages[0].content})
                return ModelResponse([call], ModelStop.tool_use)
            return ModelResponse([Text(str(results[0].content))], ModelStop.end_turn)
        return careful_reply(request)

    def run(**options: Any) -> Any:
        side, journal = str(tmp_path / "side"), tmp_path / "run.journal"
        return sync.run(PARENT, "go", model=ScriptedModel(reply), tools=[middle], deps=side,
                        journal=journal, **options)  # fmt: skip

    paused = run()
    assert paused.finish is None
    [request] = paused.waiting
    assert type(request) is ChildApproval and request.tool == publish.spec
    assert request.via == (("delegate", "a1"), ("research", "b1")) and request.agent == "research"
    asked: list[ChildApproval] = []
    done = run(approve=lambda r: asked.append(r) or True)
    assert done.output == "done: x: noted x" and [r.via for r in asked] == [request.via]
    assert _counts(tmp_path) == {"x": 1, "y": 0} and _published(tmp_path) == ["published:x"]


def test_the_terminal_asks_about_a_child_s_call_naming_its_sub_agent_and_checks_an_edit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from turnstile.core import Loop
    from turnstile.executors._console import Display, Mirror

    typed = iter(["edit", '{"text": 7}', '{"text": "z"}'])
    questions: list[str] = []
    monkeypatch.setattr("builtins.input", lambda q: questions.append(q) or next(typed))
    out = io.StringIO()
    display = Display(Mirror(Loop(PARENT)), priced=False, out=out, err=out, live=False)
    request = ChildApproval(
        "p1", "publish", {"text": "x"}, via=(("research", "a1"),), tool=publish.spec
    )
    assert display.ask(request) == Edit({"text": "z"})
    assert questions[0].startswith('  ? sub-agent research (call a1) asks: run publish {"text"')
    assert "text: expected string" in out.getvalue()
