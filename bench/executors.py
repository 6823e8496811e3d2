"""The executors' costs: trio overlapping parallel-safe tools (and ordering the others), and
the sandbox's per call cost next to a bare interpreter start measured in the same run."""

from __future__ import annotations

__all__ = ["rows"]

import gc
import subprocess
import sys
import time

import trio
from turnstile.core import LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel
from turnstile.executors import aio as trio_executor
from turnstile.executors.sandbox import Sandbox

from ._measure import Figure, repeat

Row = tuple[str, str, str, str, str]

NAP_S = 0.1
"""How long each tool of the trio turn sleeps."""
TOOLS = 8
"""How many tools the model calls in the trio turn."""
IDLE_S = 0.02
"""How long a warm pool sits idle before a call, as between the turns of a loop (untimed)."""
BASENAME = "posixpath:basename"
"""The sandboxed tool: every interpreter has its module loaded, so a call of it costs only the
sandbox (a tool's own imports come on top: the call's process imports its module)."""


def _nap_turn(calls: int, parallel_safe: bool) -> float:
    """Milliseconds of one `trio` run whose model calls `calls` tools in one reply, each
    sleeping `NAP_S` on trio's real clock, then answers."""

    @tool(parallel_safe=parallel_safe)
    async def nap(i: int) -> int:
        """Sleep `NAP_S`."""
        await trio.sleep(NAP_S)
        return i

    replies = [
        ModelResponse(
            [ToolCall(f"c{i}", "nap", {"i": i}) for i in range(calls)],
            ModelStop.tool_use,
            Usage(10, 5),
        ),
        ModelResponse([Text("rested")], ModelStop.end_turn, Usage(10, 5)),
    ]

    async def timed() -> float:
        start = time.perf_counter()
        run = await trio_executor.run(LoopSpec(), "nap", model=ScriptedModel(replies), tools=[nap])
        elapsed = time.perf_counter() - start
        answers = [r.content for r in run.messages[2].results]
        if run.output != "rested" or answers != [str(i) for i in range(calls)]:
            raise RuntimeError(f"the nap turn did not run as scripted: {run.stop_reason}")
        return elapsed * 1000

    return trio.run(timed)


def _bare_nap() -> float:
    """Milliseconds of one `trio.sleep(NAP_S)`: what one nap really takes on this machine."""

    async def timed() -> float:
        start = time.perf_counter()
        await trio.sleep(NAP_S)
        return (time.perf_counter() - start) * 1000

    return trio.run(timed)


def trio_rows(repeats: int) -> list[Row]:
    bare = repeat(_bare_nap, repeats)
    together = repeat(lambda: _nap_turn(TOOLS, parallel_safe=True), repeats)
    ordered = repeat(lambda: _nap_turn(TOOLS, parallel_safe=False), repeats)
    nominal = NAP_S * 1000
    return [
        (
            f"trio turn ms, {TOOLS} parallel-safe 100 ms tools",
            str(TOOLS),
            str(together),
            f"one trio.sleep {bare.median:.2f} → ×{together.median / bare.median:.2f}",
            _verdict(together.median <= 1.1 * nominal, f"≤ {1.1 * nominal:g} ms"),
        ),
        (
            f"trio turn ms, {TOOLS} parallel_safe=False",
            str(TOOLS),
            str(ordered),
            f"{TOOLS} × trio.sleep {TOOLS * bare.median:.2f} → "
            f"×{ordered.median / (TOOLS * bare.median):.2f}",
            _verdict(ordered.low >= TOOLS * nominal, f"≥ {TOOLS * nominal:g} ms, every run"),
        ),
    ]


def _verdict(ok: bool, target: str) -> str:
    return f"pass ({target})" if ok else f"MISS ({target})"


_MSGSPEC = "import sys; sys.path[:] = sys.argv[1].split('\\n'); import msgspec"
"""What a launcher must do before any isolation: the call's process checks its arguments with
msgspec, as in-process (a launcher runs `-I -S` with the host's `sys.path`)."""


def _spawn_ms(*flags: str, code: str = "pass") -> float:
    """Milliseconds to start this interpreter with `flags` on `-c code` and reap it."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *flags, "-c", code, "\n".join(sys.path)], check=True)
    return (time.perf_counter() - start) * 1000


def _call_ms(box: Sandbox, idle_s: float = 0.0) -> float:
    """Milliseconds of one sandboxed call, made after `idle_s` (untimed)."""
    time.sleep(idle_s)
    start = time.perf_counter()
    outcome = box.run("basename", {"p": "/bench/ok"})
    elapsed = (time.perf_counter() - start) * 1000
    if outcome != ("ok", False):
        raise RuntimeError(f"the sandboxed call failed: {outcome.content}")
    return elapsed


def sandbox_rows(rounds: int, warm_calls: int) -> list[Row]:
    """Interleaved rounds, so that the machine's load weighs on the baselines as on the calls:
    each round starts bare interpreters, makes one cold call, `warm_calls` warm ones after a
    short idle time each, and `warm_calls` back to back."""
    spawns: list[float] = []
    bare_spawns: list[float] = []
    floors: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    busy: list[float] = []
    with Sandbox([BASENAME]) as cold_box, Sandbox([BASENAME], warm=1) as warm_box:
        _call_ms(cold_box)  # the probe, and this process's first imports
        _call_ms(warm_box)
        for _ in range(rounds):
            gc.collect()
            spawns.append(_spawn_ms())
            bare_spawns.append(_spawn_ms("-I", "-S"))
            floors.append(_spawn_ms("-I", "-S", code=_MSGSPEC))
            cold.append(_call_ms(cold_box))
            warm += [_call_ms(warm_box, IDLE_S) for _ in range(warm_calls)]
            busy += [_call_ms(warm_box) for _ in range(warm_calls)]
        layers = sum(layer.in_force for layer in warm_box.layers.values())
        of = len(warm_box.layers)
    bare, no_site, floor = Figure.of(spawns), Figure.of(bare_spawns), Figure.of(floors)
    cold_f, warm_f, busy_f = Figure.of(cold), Figure.of(warm), Figure.of(busy)
    return [
        (
            "bare spawn ms, python -c pass",
            str(rounds),
            str(bare),
            f"python -I -S -c pass {no_site.median:.2f} → ×{bare.median / no_site.median:.2f}",
            "(the baseline below; -I -S skips site and this venv's .pth hooks)",
        ),
        (
            "spawn + import msgspec ms (-I -S)",
            str(rounds),
            str(floor),
            f"bare spawn {bare.median:.2f} → ×{floor.median / bare.median:.2f}",
            "(a cold call's floor: its process imports msgspec before any isolation)",
        ),
        (
            "sandbox cold call ms",
            str(rounds),
            str(cold_f),
            f"bare spawn {bare.median:.2f} → ×{cold_f.median / bare.median:.2f} "
            f"(-I -S ×{cold_f.median / no_site.median:.2f})",
            _verdict(cold_f.median <= 2 * bare.median, "≤ 2× bare spawn"),
        ),
        (
            f"sandbox warm call ms, pool idle {IDLE_S * 1000:g} ms before",
            str(len(warm)),
            str(warm_f),
            f"bare spawn {bare.median:.2f} → ×{warm_f.median / bare.median:.3f}",
            _verdict(warm_f.median <= 5, f"≤ 5 ms; {layers}/{of} layers in force"),
        ),
        (
            "sandbox warm calls ms, back to back",
            str(len(busy)),
            str(busy_f),
            f"bare spawn {bare.median:.2f} → ×{busy_f.median / bare.median:.3f}",
            _verdict(busy_f.median <= 5, "≤ 5 ms"),
        ),
    ]


def rows(sizes: list[int], times: int) -> list[Row]:
    """(measure, N, figure, baseline and ratio, target verdict) rows for the table. The sizes
    are the core's; here N is the tools in the turn or the calls measured, and `times` (1 for
    `--quick`) scales the repeats."""
    del sizes
    return [*trio_rows(max(3, times)), *sandbox_rows(max(5, 3 * times), 4)]
