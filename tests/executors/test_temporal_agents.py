"""Sub-agents under Temporal: each call's child run is a child workflow of the same workflow, its
spending counted in the parent's as under `sync`; a worker killed mid-child loses nothing and
runs no child tool twice; a child that ends without an answer, or whose parent is cancelled,
gives way."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="needs temporalio: pip install 'turnstile[temporal]'")
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from turnstile.core import (
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelReplied,
    ModelRequest,
    ProtocolError,
    StopReason,
    ToolStarted,
    tool,
)
from turnstile.core.guardrails import FinalAnswer, guardrail
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults
from turnstile.core.state import INTERRUPTED
from turnstile.executors import Agent, ChildApproval, Run, ScriptedModel, as_tool, sync
from turnstile.executors.testing import assert_history_valid

from examples.temporal.agent import FAST
from tests.executors import subagent_world as world
from tests.executors.temporal_kit import Env, env, keep, replay, temporal
from tests.executors.test_temporal import results

__all__ = ["env"]

ROOT = Path(__file__).parent.parent.parent
NAPPER = LoopSpec(system="napper", models=("m",))


@tool
async def nap(s: float) -> str:
    """Sleep `s` seconds (cancelled with its activity)."""
    await asyncio.sleep(s)
    return "rested"


sleeper = as_tool(NAPPER, name="sleeper", description="Sleep a while.", tools=[nap])


def scripted(request: ModelRequest) -> ModelResponse:
    """The world's parent and children, and a parent whose child naps for a minute."""
    results = [r for m in request.messages if type(m) is ToolResults for r in m.results]
    if request.system == "napper":
        if not results:
            return ModelResponse([ToolCall("z1", "nap", {"s": 60.0})], ModelStop.tool_use)
        return ModelResponse([Text("slept")], ModelStop.end_turn)
    if request.system == "top":
        if not results:
            return ModelResponse([ToolCall("t1", "lead", {"prompt": "go"})], ModelStop.tool_use)
        return ModelResponse([Text(f"top: {results[0].content}")], ModelStop.end_turn)
    if request.system == "guarded":
        return ModelResponse([Text("a long answer")], ModelStop.end_turn)
    if request.system == "guarding":
        if not results:
            return ModelResponse([ToolCall("g1", "guarded", {"prompt": "?"})], ModelStop.tool_use)
        return ModelResponse([Text("ok")], ModelStop.end_turn)
    if request.system == "publisher":
        if not results:
            call = ToolCall("w1", "write", {"prompt": "caching"})
            return ModelResponse([call], ModelStop.tool_use)
        return ModelResponse([Text(f"done: {results[0].content}")], ModelStop.end_turn)
    if request.system == "two publishers":
        if not results:
            calls = [ToolCall(f"w{i}", "write", {"prompt": p}) for i, p in ((1, "A"), (2, "B"))]
            return ModelResponse(calls, ModelStop.tool_use)
        text = " / ".join(str(r.content) for r in results)
        return ModelResponse([Text(text)], ModelStop.end_turn)
    if request.system == "writer":
        if not results:
            page = {"page": request.messages[0].content}
            return ModelResponse([ToolCall("p1", "publish", page)], ModelStop.tool_use)
        return ModelResponse([Text(f"writer: {results[0].content}")], ModelStop.end_turn)
    if request.system == "sleepy parent":
        if not results:
            return ModelResponse([ToolCall("s1", "sleeper", {"prompt": "z"})], ModelStop.tool_use)
        return ModelResponse([Text(f"it said: {results[0].content}")], ModelStop.end_turn)
    return world.reply(request)


SHARED = ScriptedModel(scripted)


@tool(needs_approval=True)
def publish(page: str) -> str:
    """Publish a page."""
    return f"published {page}"


writer = as_tool(
    LoopSpec(system="writer", models=("m",)),
    name="write",
    description="Write a page and publish it.",
    tools=[publish],
)
PUBLISHER = LoopSpec(system="publisher", models=("m",))


@guardrail(on="final")
def terse(answer: FinalAnswer) -> str | None:
    return "too long" if len(answer.text) > 5 else None


guarded = as_tool(
    Agent(LoopSpec(system="guarded", models=("m",)), model=SHARED, guardrails=[terse]),
    name="guarded",
    description="Answer tersely.",
)
GUARDING = LoopSpec(system="guarding", models=("m",))


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("side") / "side"


@pytest.fixture(scope="module")
def queue(env: Env, side: Path) -> Iterator[str]:
    """A worker in this process serving the world's parent and children, and the sleeper."""
    name = f"agents-{uuid.uuid4().hex[:12]}"

    async def make() -> Any:
        models = {"m": ScriptedModel(scripted), "shared": SHARED}
        tools = [world.research, sleeper, guarded, writer]
        return temporal.worker(
            env.client, models=models, tools=tools, deps=str(side), task_queue=name
        )

    made = env.wait(make(), 30)
    env.submit(made.run())
    try:
        yield name
    finally:
        env.wait(made.shutdown(), 30)


def started(env: Env, queue: str, spec: LoopSpec, **options: Any) -> Any:
    options.setdefault("id", f"{queue}-{uuid.uuid4().hex[:8]}")
    return env.wait(
        temporal.start(env.client, spec, "go", model="m", task_queue=queue, **options), 30
    )


def by_sync(folder: Path) -> Run:
    """The same world's run under `sync`, its side file in `folder`."""
    folder.mkdir(exist_ok=True)
    return world.execute("sync", folder)


def child_id(loop: Loop, parent_id: str, call_id: str) -> str:
    """A child workflow's id: the parent's, with the reply that made the call and its id."""
    at = next(
        i
        for i, e in enumerate(loop.state.events)
        if type(e) is ModelReplied
        and any(type(p) is ToolCall and p.id == call_id for p in e.response.content)
    )
    return f"{parent_id}/{at}-{call_id}"


def test_a_sub_agent_call_runs_its_child_as_a_child_workflow_and_its_cost_counts(
    env: Env, queue: str, side: Path, tmp_path: Path
) -> None:
    # the id a kept history replays under (its file's name): its children's ids are made of it
    handle = started(env, queue, world.PARENT, id="sub-agents")
    run = env.wait(handle.result(), 90)
    expected = by_sync(tmp_path)
    assert run.stop_reason is StopReason.completed and run.output == expected.output
    assert (run.usage, run.cost) == (expected.usage, expected.cost)
    assert sorted(side.read_text().split()) == ["x", "y"]  # each child's tool ran once
    assert {k: c.output for k, c in run.children.items()} == {
        k: c.output for k, c in expected.children.items()
    }
    own = sum(e.usage.input_tokens * 1.0 + e.usage.output_tokens * 2.0 for e in replies(run))
    assert run.cost == pytest.approx(own / 1e6 + sum(c.cost for c in run.children.values()))
    assert_history_valid(run)
    history = env.wait(handle.workflow.fetch_history(), 30)
    replay(history)
    keep(history, "sub-agents")


def replies(run: Run) -> list[Any]:
    return [e.response for e in run.state.events if type(e) is ModelReplied]


def test_a_child_killed_with_its_worker_resumes_and_runs_no_tool_twice(
    env: Env, tmp_path: Path
) -> None:
    """The worker dies right after the second child's tool ran, before it reported: a new
    worker finishes both runs; that call is interrupted, not made again; costs add up."""
    queue = f"agents-kill-{uuid.uuid4().hex[:12]}"

    def spawn(kill_after: str = "") -> subprocess.Popen[bytes]:
        code = "import sys; from tests.executors.subagent_world import serve; serve(*sys.argv[1:])"
        argv = [sys.executable, "-c", code, env.address, queue, str(tmp_path), kill_after]
        return subprocess.Popen(argv, cwd=ROOT)

    first = spawn(kill_after="y")
    second = None
    try:
        handle = started(env, queue, world.PARENT, options=FAST)
        assert first.wait(60) == -9  # killed itself in the child's note of "y"
        second = spawn()
        run = env.wait(handle.result(), 120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    noted = Counter((tmp_path / "side").read_text().split())
    assert noted["y"] == 1 and noted["x"] <= 1, noted  # none twice
    expected = by_sync(tmp_path / "sync")
    assert run.stop_reason is StopReason.completed
    assert (run.usage, run.cost) == (expected.usage, expected.cost)
    assert results(run.children["a2"])["n1"] == (INTERRUPTED, True)  # ran, never reported
    replay(env.wait(handle.workflow.fetch_history(), 30))
    child = env.client.get_workflow_handle(child_id(run.loop, handle.workflow.id, "a2"))
    replay(env.wait(child.fetch_history(), 30))


def wait_for_child(env: Env, handle: Any, call_id: str) -> Any:
    """The child workflow of `call_id` once its tool runs."""
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "the child never started"
        loop = env.wait(handle.loop(), 10)
        if loop is not None and any(
            type(e) is ToolStarted and e.call_id == call_id for e in loop.state.events
        ):
            child = env.client.get_workflow_handle(child_id(loop, handle.workflow.id, call_id))
            try:
                child_loop = env.wait(child.query("state", result_type=bytes), 10)
            except RPCError:
                child_loop = b""
            if child_loop and b"tool_started" in child_loop:
                return child
        time.sleep(0.05)


SLEEPY = LoopSpec(system="sleepy parent", models=("m",))


def test_a_child_that_ends_without_its_answer_gives_an_error_result(env: Env, queue: str) -> None:
    handle = started(env, queue, SLEEPY)
    child = wait_for_child(env, handle, "s1")
    env.wait(child.terminate("enough"), 30)
    run = env.wait(handle.result(), 60)
    message = "sleeper stopped before its answer: its workflow ended (Terminated)"
    assert results(run) == {"s1": (message, True)}
    assert run.stop_reason is StopReason.completed and run.children == {}


def test_an_agents_guardrails_run_in_its_child_and_its_answer_is_as_under_sync(
    env: Env, queue: str
) -> None:
    run = env.wait(started(env, queue, GUARDING).result(), 60)
    expected = sync.run(GUARDING, "go", model=SHARED, tools=[guarded])
    assert results(run) == results(expected)
    [(content, is_error)] = results(run).values()
    assert is_error and "guarded stopped (guardrail)" in str(content) and "too long" in str(content)


def test_a_cancelled_parent_cancels_its_child(env: Env, queue: str) -> None:
    handle = started(env, queue, SLEEPY)
    child = wait_for_child(env, handle, "s1")
    env.wait(handle.workflow.cancel(), 30)
    assert env.wait(handle.result(), 60).stop_reason is StopReason.cancelled
    ended = Loop.load(NAPPER, env.wait(child.result(), 60))
    assert ended.state.stop_reason is StopReason.cancelled
    assert env.wait(child.describe(), 30).status is WorkflowExecutionStatus.COMPLETED


def test_a_sub_agents_client_model_must_be_among_the_workers_models(env: Env) -> None:
    own = ScriptedModel(scripted)
    helper = as_tool(NAPPER, name="helper", description="Help.", model=own, tools=[nap])

    async def make(models: dict[str, Any]) -> Any:
        return temporal.worker(env.client, models=models, tools=[helper])

    with pytest.raises(TypeError, match="the sub-agent helper's model is a client"):
        env.wait(make({"m": ScriptedModel(scripted)}), 30)
    assert env.wait(make({"own": own}), 30) is not None
    named = as_tool(NAPPER, name="named", description="Help.", model="elsewhere", tools=[nap])
    with pytest.raises(TypeError, match="model 'elsewhere' is not among the worker's models"):
        env.wait(temporal_worker_of(env, named), 30)


async def temporal_worker_of(env: Env, tool: Any) -> Any:
    return temporal.worker(env.client, models={"m": ScriptedModel(scripted)}, tools=[tool])


TOP = LoopSpec(system="top", models=("m",), prices=world.PRICES)
lead = as_tool(
    Agent(world.PARENT, model=SHARED, tools=[world.research]), name="lead", description="Lead."
)


def test_a_childs_own_sub_agents_run_as_its_child_workflows(env: Env, tmp_path: Path) -> None:
    """An agent (its model a client the worker names) whose sub-agent is called twice: three
    levels of workflows, the whole tree's cost in the top run's, as under `sync`; once no
    worker runs, the run's children are still read from its history."""
    queue = f"agents-nested-{uuid.uuid4().hex[:12]}"
    side = tmp_path / "side"

    async def go() -> tuple[Any, Run]:
        async with temporal.worker(
            env.client, models={"m": SHARED}, tools=[lead], deps=str(side), task_queue=queue
        ):
            handle = await temporal.start(
                env.client, TOP, "go", model="m", id=queue, task_queue=queue
            )
            return handle, await handle.result()

    handle, run = env.wait(go(), 120)
    (tmp_path / "sync").mkdir()
    expected = sync.run(TOP, "go", model=SHARED, tools=[lead], deps=str(tmp_path / "sync" / "side"))
    assert run.output == expected.output == "top: found: x: noted x / y: noted y"
    assert (run.usage, run.cost) == (expected.usage, expected.cost)
    assert sorted(side.read_text().split()) == ["x", "y"]
    assert run.children["t1"].output == expected.children["t1"].output
    again = env.wait(handle.result(), 60)  # the worker is gone: the server has it all
    assert {k: c.output for k, c in again.children.items()} == {"t1": expected.output[5:]}


def test_a_child_s_approval_is_asked_through_the_parent_s_handle_and_answered_there(
    env: Env, queue: str
) -> None:
    """`waiting()` shows it as a `ChildApproval` naming the sub-agent's call; `answer()` takes
    it (or its id) to the child workflow, whose schema check refuses an edit that misfits."""
    handle = started(env, queue, PUBLISHER)
    deadline = time.monotonic() + 60
    while not (waiting := env.wait(handle.waiting(), 10)) and time.monotonic() < deadline:
        time.sleep(0.1)
    [request] = waiting
    assert isinstance(request, ChildApproval) and request.via == (("write", "w1"),)
    assert (request.name, request.arguments) == ("publish", {"page": "caching"})
    assert request.tool is not None and request.tool.name == "publish"
    with pytest.raises(InvalidObservation):
        env.wait(handle.answer(request, edit={"page": 7}), 30)
    env.wait(handle.answer("p1", edit={"page": "caching-v2"}), 30)
    run = env.wait(handle.result(), 60)
    assert run.output.startswith("done: writer: (a person approved this call")
    assert run.output.endswith("published caching-v2")
    assert env.wait(handle.waiting(), 10) == []


def test_requests_of_two_children_with_one_call_id_are_answered_each_in_its_own_child(
    env: Env, queue: str
) -> None:
    """Both children wait on a call `p1`: the request goes down its own `via`; the bare id,
    which two runs await, is refused; a handle made without the client cannot reach them."""
    handle = started(env, queue, LoopSpec(system="two publishers", models=("m",)))
    deadline = time.monotonic() + 60
    while len(waiting := env.wait(handle.waiting(), 10)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    first, second = sorted(waiting, key=lambda r: r.via)  # type: ignore[attr-defined]
    assert [(r.via, r.arguments) for r in (first, second)] == [  # type: ignore[attr-defined]
        ((("write", "w1"),), {"page": "A"}),
        ((("write", "w2"),), {"page": "B"}),
    ]
    with pytest.raises(ProtocolError, match="2 runs await an approval of a call 'p1'"):
        env.wait(handle.answer("p1", True), 30)
    bare = temporal.LoopHandle(handle.workflow, handle.spec)
    with pytest.raises(TypeError, match="client="):
        env.wait(bare.waiting(), 30)
    env.wait(handle.answer(second, "not B"), 30)
    [left] = env.wait(handle.waiting(), 10)
    assert left.via == (("write", "w1"),)  # type: ignore[attr-defined]
    env.wait(handle.answer(left, True), 30)
    run = env.wait(handle.result(), 60)
    assert run.output.startswith("writer: published A / writer:")
    assert "not B" in run.output
