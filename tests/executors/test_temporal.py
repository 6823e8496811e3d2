"""The Temporal executor: a worker killed with -9 mid-run (in a tool call, in a model call)
loses no call and runs none twice that is not replay-safe; histories replay, and a changed
decision is a `NondeterminismError`; many runs share a worker; approvals are updates; a long
run continues as new with the same event log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("temporalio", reason="needs temporalio: pip install 'turnstile[temporal]'")
from temporalio.client import WorkflowHistory
from temporalio.workflow import NondeterminismError
from turnstile.core import (
    Approved,
    Event,
    Guards,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelRequest,
    ProtocolError,
    ToolContext,
    tool,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
)
from turnstile.core.request import Purpose
from turnstile.core.state import INTERRUPTED
from turnstile.executors import ApprovalNeeded, Run, RunFinished, ScriptedModel, Update, sync
from turnstile.executors.testing import assert_history_valid
from turnstile.providers import TextDelta

from examples.temporal import agent
from tests.executors.temporal_kit import HISTORIES, Env, env, keep, temporal
from tests.executors.temporal_kit import replay as replay_history
from tests.executors.test_conformance import event_log

__all__ = ["env"]

ROOT = Path(__file__).parent.parent.parent


def results(run: Run) -> dict[str, tuple[object, bool]]:
    return {
        r.call_id: (r.content, r.is_error)
        for m in run.messages
        if type(m) is ToolResults
        for r in m.results
    }


class Workers:
    """Worker processes serving one queue, each killed (or stopped) by its own pid."""

    def __init__(self, env: Env, log: Path) -> None:
        self.env = env
        self.log = log
        self.queue = f"kill-{uuid.uuid4().hex[:12]}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "examples.temporal.agent", "worker", self.env.address]
        proc = subprocess.Popen([*argv, self.queue, str(self.log)], cwd=ROOT)
        self.procs.append(proc)
        return proc

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for(self, seen: Callable[[list[str]], bool], timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not seen(self.lines()):
            if time.monotonic() > end:
                raise TimeoutError(f"never came: the log holds {self.lines()}")
            time.sleep(0.02)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture
def workers(env: Env, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(env, tmp_path / "calls.log")
    try:
        yield pool
    finally:
        pool.stop()


def killed_run(workers: Workers, kill_when: Callable[[list[str]], bool]) -> tuple[Run, Any]:
    """Start the agent's run on one worker, kill -9 it once the log says `kill_when`, let a
    second worker finish; the run and its history."""
    env = workers.env
    first = workers.spawn()
    handle = env.wait(
        temporal.start(
            env.client,
            agent.SPEC,
            agent.PROMPT,
            model="scripted",
            id=workers.queue,
            task_queue=workers.queue,
            options=agent.FAST,
        ),
        30,
    )
    workers.wait_for(kill_when)
    first.kill()
    first.wait(10)
    workers.spawn()
    run = env.wait(handle.result(), 90)
    return run, env.wait(handle.workflow.fetch_history(), 30)


def check_nothing_lost_or_doubled(run: Run, lines: list[str]) -> None:
    assert run.stop_reason.value == "completed", run
    assert_history_valid(run)
    assert run.trajectory() == ["pay"] * 6 + ["balance"]
    starts = Counter(line.split()[1] for line in lines if line.startswith("start "))
    assert all(n == 1 for n in starts.values()), starts  # no payment made twice
    got = results(run)
    for call_id in agent.PAYMENTS:
        if got[call_id] != (INTERRUPTED, True):
            assert got[call_id] == (f"paid {call_id[4:]}", False)
            assert f"paid {call_id}" in lines and starts[call_id] == 1


def test_kill_9_during_a_tool_call(workers: Workers) -> None:
    run, history = killed_run(workers, lambda lines: "start pay-3" in lines)
    lines = workers.lines()
    check_nothing_lost_or_doubled(run, lines)
    assert results(run)["pay-3"] == (INTERRUPTED, True)  # killed inside it: never made again
    assert "paid pay-3" not in lines
    replay_history(history)
    keep(history, "kill-during-a-tool-call")


def test_kill_9_during_a_model_call(workers: Workers) -> None:
    run, history = killed_run(workers, lambda lines: "model 1" in lines)
    lines = workers.lines()
    check_nothing_lost_or_doubled(run, lines)
    assert lines.count("model 1") == 2  # asked again by the second worker
    assert INTERRUPTED not in [content for content, _ in results(run).values()]
    replay_history(history)
    keep(history, "kill-during-a-model-call")


def kept() -> list[Any]:
    paths = sorted(HISTORIES.glob("*.json"))
    return [WorkflowHistory.from_json(path.stem, path.read_text()) for path in paths]


def test_kept_histories_replay_without_a_nondeterminism_error() -> None:
    histories = kept()
    assert len(histories) >= 10
    replay_history(*histories)


def test_a_changed_decision_is_a_nondeterminism_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that decided otherwise (here: a round's calls handed out in the other order) must
    not take over runs recorded with this one."""
    [history] = [h for h in kept() if h.workflow_id == "anthropic-weather"]
    send = Loop.send
    monkeypatch.setattr(Loop, "send", lambda loop, obs: send(loop, obs)[::-1])
    with pytest.raises(NondeterminismError, match="Activity id of scheduled event"):
        replay_history(history)


# -- runs on a worker in this process ------------------------------------------------------------


@tool
def add(i: int) -> int:
    """Add one."""
    return i + 1


@tool(needs_approval=True)
def wire(amount: int) -> str:
    """Wire money: a human approves each transfer."""
    return f"wired {amount}"


@tool
def whoami(context: ToolContext[str]) -> str:
    """Say who the run is for."""
    return f"for {context.deps}"


@tool
async def awhoami(context: ToolContext[str]) -> str:
    """Say who the run is for, asynchronously."""
    return f"for {context.deps}"


@tool
def nap(s: float) -> str:
    """Sleep `s` seconds."""
    time.sleep(s)
    return "rested"


def counting(turns: int) -> Callable[[ModelRequest], ModelResponse]:
    """A model that calls `add` for `turns` turns, then answers (and sums up when finalizing)."""

    def reply(request: ModelRequest) -> ModelResponse:
        turn = sum(type(m) is AssistantMessage for m in request.messages)
        if request.purpose is Purpose.finalize or turn >= turns:
            return ModelResponse([Text(f"done after {turn}")], ModelStop.end_turn)
        return ModelResponse([ToolCall(f"c{turn}", "add", {"i": turn})], ModelStop.tool_use)

    return reply


def wiring(request: ModelRequest) -> ModelResponse:
    if any(type(m) is ToolResults for m in request.messages):
        return ModelResponse([Text("transfers handled")], ModelStop.end_turn)
    calls = [ToolCall("w1", "wire", {"amount": 5}), ToolCall("w2", "wire", {"amount": 700})]
    return ModelResponse(calls, ModelStop.tool_use)


def napping(request: ModelRequest) -> ModelResponse:
    if request.purpose is Purpose.finalize:
        return ModelResponse([Text("out of time")], ModelStop.end_turn)
    return ModelResponse([ToolCall("n1", "nap", {"s": 2.0})], ModelStop.tool_use)


SPEC = LoopSpec(tools=(add.spec, wire.spec, nap.spec))
MODELS = {"count3": counting(3), "count12": counting(12), "wiring": wiring, "napping": napping}


class InProcess:
    """A worker on the client's event loop, serving `MODELS` and the tools above on `queue`."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.queue = f"inproc-{uuid.uuid4().hex[:12]}"

        async def make() -> Any:
            models = {name: ScriptedModel(fn) for name, fn in MODELS.items()}
            return temporal.worker(
                env.client, models=models, tools=[add, wire, nap], task_queue=self.queue
            )

        self.worker = env.wait(make(), 30)
        self.running = env.submit(self.worker.run())

    def start(self, prompt: str | None, model: str, **kwargs: Any) -> Any:
        run_id = f"{self.queue}-{uuid.uuid4().hex[:8]}"
        return self.env.wait(
            temporal.start(
                self.env.client,
                kwargs.pop("spec", SPEC),
                prompt,
                model=model,
                id=run_id,
                task_queue=self.queue,
                **kwargs,
            ),
            30,
        )

    def close(self) -> None:
        self.env.wait(self.worker.shutdown(), 30)


@pytest.fixture(scope="module")
def inproc(env: Env) -> Iterator[InProcess]:
    worker = InProcess(env)
    try:
        yield worker
    finally:
        worker.close()


def sync_log(model: str, prompt: str = "count", spec: LoopSpec = SPEC) -> list[str]:
    run = sync.run(spec, prompt, model=ScriptedModel(MODELS[model]), tools=[add, wire, nap])
    return event_log(run)


def test_twenty_runs_at_once_on_one_worker(env: Env, inproc: InProcess) -> None:
    handles = [inproc.start("count", "count3") for _ in range(20)]

    async def results() -> list[Run]:
        return list(await asyncio.gather(*(h.result() for h in handles)))

    runs = env.wait(results(), 120)
    assert [event_log(run) for run in runs] == [sync_log("count3")] * 20


def test_a_long_run_continues_as_new_with_the_same_event_log(env: Env, inproc: InProcess) -> None:
    # the dev server starts a continued run no sooner than a second after the last: keep to two
    handle = inproc.start("count", "count12", options=temporal.Options(continue_after=50))
    run = env.wait(handle.result(), 60)
    assert event_log(run) == sync_log("count12")
    latest = env.client.get_workflow_handle(handle.workflow.id)
    assert env.wait(latest.describe(), 30).run_id != handle.workflow.first_execution_run_id
    history = env.wait(latest.fetch_history(), 30)
    assert len(history.events) < 50 + 20  # the last run's, a turn past the limit at most
    replay_history(history)


def test_approvals_are_updates_and_a_dump_from_sync_resumes(env: Env, inproc: InProcess) -> None:
    waiting = sync.run(SPEC, "pay", model=ScriptedModel(wiring), tools=[add, wire, nap])
    assert [c.id for c in waiting.waiting] == ["w1", "w2"]
    handle = inproc.start(None, "wiring", loop=Loop.load(SPEC, waiting.loop.dump()))
    deadline = time.monotonic() + 30
    while len(env.wait(handle.waiting(), 10)) < 2:
        assert time.monotonic() < deadline, "the approvals never came"
        time.sleep(0.05)
    with pytest.raises(ProtocolError, match="awaits no approval of a call 'w3'"):
        env.wait(handle.answer("w3", True), 30)  # no such call awaits approval: refused
    env.wait(handle.answer("w1", True), 30)
    env.wait(handle.answer("w2", "too much"), 30)
    run = env.wait(handle.result(), 30)
    assert run.stop_reason.value == "completed"
    assert [type(e).__name__ for e in run.state.events].count("Resumed") == 1
    got = results(run)
    assert got["w1"] == ("wired 5", False)
    assert got["w2"][1] and "too much" in str(got["w2"][0])


def test_an_approval_is_answered_with_an_edit_and_an_edit_that_does_not_fit_is_refused(
    env: Env, inproc: InProcess
) -> None:
    handle = inproc.start("pay", "wiring")
    deadline = time.monotonic() + 30
    while len(env.wait(handle.waiting(), 10)) < 2:
        assert time.monotonic() < deadline, "the approvals never came"
        time.sleep(0.05)
    with pytest.raises(InvalidObservation, match=r"arguments\.amount: the edited arguments"):
        env.wait(handle.answer("w2", edit={"amount": "all of it"}), 30)
    with pytest.raises(ValueError, match="an edit approves the call"):
        env.wait(handle.answer("w2", "no", edit={"amount": 70}), 30)
    assert len(env.wait(handle.waiting(), 10)) == 2  # refused: the run still waits on both
    env.wait(handle.answer("w1", True), 30)
    env.wait(handle.answer("w2", edit={"amount": 70}), 30)
    run = env.wait(handle.result(), 30)
    assert results(run) == {"w1": ("wired 5", False), "w2": (NOTED.format(70) + "wired 70", False)}
    assert [e.arguments for e in run.state.events if type(e) is Approved] == [None, {"amount": 70}]
    history = env.wait(handle.workflow.fetch_history(), 30)
    keep(history, "edited-approval")
    replay_history(history)


NOTED = (
    '(a person approved this call with its arguments changed to {{"amount":{0}}}; this is the '
    "result of the call as changed)\n"
)


def test_the_deadline_fires_from_a_timer_while_a_tool_runs(env: Env, inproc: InProcess) -> None:
    spec = msgspec.structs.replace(SPEC, guards=Guards(deadline_s=0.5))
    run = env.wait(inproc.start("nap", "napping", spec=spec).result(), 30)
    assert run.stop_reason.value == "deadline" and run.output == "out of time"
    assert "Tick" in [type(e).__name__ for e in run.state.events]
    assert results(run)["n1"][1]  # the nap's result says it was cut short


def test_a_cancelled_workflow_finishes_cancelled(env: Env, inproc: InProcess) -> None:
    handle = inproc.start("nap", "napping")
    deadline = time.monotonic() + 30
    while (loop := env.wait(handle.loop(), 10)) is None or not loop.state.round:
        assert time.monotonic() < deadline, "the nap never started"
        time.sleep(0.05)
    env.wait(handle.workflow.cancel(), 30)
    run = env.wait(handle.result(), 30)
    assert run.stop_reason.value == "cancelled"
    assert_history_valid(run)


def asking(request: ModelRequest) -> ModelResponse:
    if any(type(m) is ToolResults for m in request.messages):
        return ModelResponse([Text("asked")], ModelStop.end_turn)
    calls = [ToolCall("a1", "whoami", {}), ToolCall("a2", "awhoami", {})]
    return ModelResponse(calls, ModelStop.tool_use)


def test_a_workers_deps_reach_the_tools_that_ask_for_them(env: Env) -> None:
    queue = f"deps-{uuid.uuid4().hex[:8]}"
    spec = LoopSpec(tools=(whoami.spec, awhoami.spec))

    async def go() -> Run:
        models = {"asking": ScriptedModel(asking)}
        tools = [whoami, awhoami]
        async with temporal.worker(
            env.client, models=models, tools=tools, deps="ada", task_queue=queue
        ):
            return await temporal.run(
                env.client, spec, "who?", model="asking", id=queue, task_queue=queue
            )

    assert results(env.wait(go(), 60)) == {"a1": ("for ada", False), "a2": ("for ada", False)}


def test_on_event_and_on_update_follow_the_run_as_sync_shows_it(
    env: Env, inproc: InProcess
) -> None:
    events: list[Event] = []
    updates: list[Update] = []
    handle = inproc.start("count", "count3", on_event=events.append, on_update=updates.append)
    run = env.wait(handle.result(), 60)
    shown: tuple[list[Event], list[Update]] = ([], [])
    by_sync = sync.run(
        SPEC,
        "count",
        model=ScriptedModel(MODELS["count3"]),
        tools=[add, wire, nap],
        on_event=shown[0].append,
        on_update=shown[1].append,
    )
    assert events == run.state.events
    assert event_log(run) == event_log(by_sync)
    # a model call streams in the worker: its deltas do not cross to the client
    assert updates == [u for u in shown[1] if type(u) is not TextDelta]


def test_on_update_shows_an_approval_while_result_waits(env: Env, inproc: InProcess) -> None:
    updates: list[Update] = []
    handle = inproc.start("pay", "wiring", on_update=updates.append)
    finished = env.submit(handle.result())
    deadline = time.monotonic() + 30
    while sum(type(u) is ApprovalNeeded for u in updates) < 2:
        assert time.monotonic() < deadline, "the approvals were never shown"
        time.sleep(0.05)
    env.wait(handle.answer("w1", True), 30)
    env.wait(handle.answer("w2", False), 30)
    assert finished.result(30).stop_reason.value == "completed"
    assert type(updates[-1]) is RunFinished


class Answer(msgspec.Struct):
    text: str


def test_a_typed_output_goes_by_its_import_name_and_code_is_refused() -> None:
    from turnstile.executors.temporal._wire import decode_input, encode, shippable, typed

    spec = LoopSpec(output=Answer)
    sent = encode(shippable(spec))
    assert msgspec.json.decode(sent)["output"] == f"{__name__}:Answer"
    assert typed(decode_input(encode({"spec": spec, "model": "m"})).spec).output is Answer

    class Local(msgspec.Struct):
        text: str

    for holding_code in (LoopSpec(output=Local), LoopSpec(stop_when=(lambda state: True,))):
        with pytest.raises(ValueError, match="cannot be sent to a workflow as JSON"):
            asyncio.run(temporal.start(None, holding_code, "hi", model="m", id="never"))  # type: ignore[arg-type]


def test_without_temporalio_the_import_says_which_extra_to_install() -> None:
    code = (
        "import sys; sys.modules['temporalio'] = None\n"
        "try:\n    import turnstile.executors.temporal\n"
        "except ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == (
        "MissingExtra turnstile.executors.temporal needs the temporalio package: "
        "pip install 'turnstile[temporal]'"
    )
