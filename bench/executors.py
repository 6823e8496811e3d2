"""The executors' costs: trio overlapping parallel-safe tools (and ordering the others), and
the sandbox's per call cost, per tier this machine can give, next to a bare interpreter start
and one that imports msgspec, measured in the same run: wall times, and the CPU time of all of
a warm call's processes (which a loaded machine does not inflate)."""

from __future__ import annotations

__all__ = ["rows"]

import contextlib
import gc
import os
import resource
import subprocess
import sys
import time

import trio
from turnstile.core import LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel
from turnstile.executors import aio as trio_executor
from turnstile.executors.sandbox import Sandbox, available_tiers

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


def _cpu_ms() -> float:
    """CPU milliseconds this process and every process below it have used so far (those
    reaped included): what a machine's load cannot inflate, as it does wall times."""
    ticks = os.sysconf("SC_CLK_TCK")
    below: dict[str, list[str]] = {}
    used: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        below.setdefault(fields[1].decode(), []).append(entry)
        used[entry] = sum(int(n) for n in fields[11:15]) / ticks * 1000
    total, left = 0.0, list(below.get(str(os.getpid()), []))
    while left:
        pid = left.pop()
        total += used.get(pid, 0.0)
        left += below.get(pid, [])
    own = resource.getrusage(resource.RUSAGE_SELF)
    gone = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + (own.ru_utime + own.ru_stime + gone.ru_utime + gone.ru_stime) * 1000


def _tiers() -> list[str]:
    """The sandbox's tiers this machine can give, strongest first."""
    return [name for name, tier in available_tiers().items() if tier.available]


def sandbox_rows(rounds: int, warm_calls: int) -> list[Row]:
    """Interleaved rounds, so that the machine's load weighs on the baselines as on the calls:
    each round starts bare interpreters, then per tier this machine can give makes one cold
    call, `warm_calls` warm ones after a short idle time each, and `warm_calls` back to back."""
    spawns: list[float] = []
    bare_spawns: list[float] = []
    floors: list[float] = []
    tiers = _tiers()
    cold: dict[str, list[float]] = {tier: [] for tier in tiers}
    warm: dict[str, list[float]] = {tier: [] for tier in tiers}
    busy: dict[str, list[float]] = {tier: [] for tier in tiers}
    floor_cpu: list[float] = []
    busy_cpu: dict[str, list[float]] = {tier: [] for tier in tiers}
    layers: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        boxes = {
            tier: (
                stack.enter_context(Sandbox([BASENAME], tier=tier)),
                stack.enter_context(Sandbox([BASENAME], tier=tier, warm=1)),
            )
            for tier in tiers
        }
        for tier, (cold_box, warm_box) in boxes.items():
            _call_ms(cold_box)  # the probe, and this process's first imports
            _call_ms(warm_box)
            used = [layer.in_force for layer in warm_box.layers.values()]
            layers[tier] = f"{sum(used)}/{len(used)} layers"
        for _ in range(rounds):
            gc.collect()
            spawns.append(_spawn_ms())
            bare_spawns.append(_spawn_ms("-I", "-S"))
            before = _cpu_ms()
            floors.append(_spawn_ms("-I", "-S", code=_MSGSPEC))
            floor_cpu.append(_cpu_ms() - before)
            for tier, (cold_box, warm_box) in boxes.items():
                cold[tier].append(_call_ms(cold_box))
                warm[tier] += [_call_ms(warm_box, IDLE_S) for _ in range(warm_calls)]
                before = _cpu_ms()
                busy[tier] += [_call_ms(warm_box) for _ in range(warm_calls)]
                busy_cpu[tier].append((_cpu_ms() - before) / warm_calls)
    bare, no_site, floor = Figure.of(spawns), Figure.of(bare_spawns), Figure.of(floors)
    found = [
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
    ]
    for tier in tiers:
        found += _tier_rows(tier, layers[tier], floor, cold[tier], warm[tier], busy[tier])
        cpu, floor_cpu_ms = Figure.of(busy_cpu[tier]), Figure.of(floor_cpu).median
        found.append(
            (
                f"sandbox {tier} warm call CPU ms, all its processes, back to back",
                str(len(busy[tier])),
                str(cpu),
                f"msgspec floor's CPU {floor_cpu_ms:.2f} → ×{cpu.median / floor_cpu_ms:.3f}",
                "(CPU time, which load does not inflate; clock ticks, per round)",
            )
        )
    return found


def _tier_rows(
    tier: str,
    layers: str,
    floor: Figure,
    cold: list[float],
    warm: list[float],
    busy: list[float],
) -> list[Row]:
    """A tier's cold, warm and back to back calls, against the msgspec floor and 2 ms."""
    cold_f, warm_f, busy_f = Figure.of(cold), Figure.of(warm), Figure.of(busy)
    return [
        (
            f"sandbox {tier} cold call ms",
            str(len(cold)),
            str(cold_f),
            f"msgspec floor {floor.median:.2f} → +{cold_f.median - floor.median:.2f}",
            _verdict(cold_f.median <= floor.median + 10, "≤ floor + 10 ms"),
        ),
        (
            f"sandbox {tier} warm call ms, pool idle {IDLE_S * 1000:g} ms before",
            str(len(warm)),
            str(warm_f),
            f"msgspec floor {floor.median:.2f} → ×{warm_f.median / floor.median:.3f}",
            _verdict(warm_f.median <= 2, f"≤ 2 ms; {layers} in force"),
        ),
        (
            f"sandbox {tier} warm calls ms, back to back",
            str(len(busy)),
            str(busy_f),
            f"msgspec floor {floor.median:.2f} → ×{busy_f.median / floor.median:.3f}",
            _verdict(busy_f.median <= 2, "≤ 2 ms"),
        ),
    ]


def rows(sizes: list[int], times: int) -> list[Row]:
    """(measure, N, figure, baseline and ratio, target verdict) rows for the table. The sizes
    are the core's; here N is the tools in the turn or the calls measured, and `times` (1 for
    `--quick`) scales the repeats."""
    del sizes
    return [*trio_rows(max(3, times)), *sandbox_rows(max(5, 3 * times), 4)]
