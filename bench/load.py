"""The async executor under load: many runs at once, each of 4 model calls and 6 tool calls (3
rounds of 2 calls that overlap, then the answer), an async model waiting 1–20 ms a call and async
tools 1–5 ms (seeded random waits), against baselines measured in the same run.

The baselines: a hand-written coroutine per run doing the same waits in the same shape on bare
asyncio or bare trio (the two calls of a round overlapping, as the executor overlaps them), and
the sync executor doing the same run without the waits. Figures are CPU time (the process's,
worker threads included), so the load of other jobs on the machine counts little: the seconds a
whole round of runs takes, or µs per run. Each repeat interleaves the round's variants; a ratio
is the median of the per-repeat ratios.
"""

from __future__ import annotations

__all__ = ["main", "rows", "svg"]

import argparse
import asyncio
import gc
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path
from typing import Any

import trio
from turnstile.core import Guards, LoopSpec, ModelRequest, Tool, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Journal, aio, sync

from ._measure import Figure

Row = tuple[str, str, str, str, str]

ROUNDS, CALLS = 3, 2
"""Tool rounds a run, and calls a round: 4 model calls and 6 tool calls a run."""
SPEC = LoopSpec(guards=Guards(max_turns=10))
SEED = 26


class _Shape:
    """One run's seeded waits (seconds): a model call's, then each round's tool calls'."""

    def __init__(self, i: int) -> None:
        rnd = random.Random(SEED * 1_000_003 + i)
        self.model = [rnd.uniform(0.001, 0.020) for _ in range(ROUNDS + 1)]
        self.tools = [[rnd.uniform(0.001, 0.005) for _ in range(CALLS)] for _ in range(ROUNDS)]
        usage = Usage(10, 5)
        self.replies = [
            ModelResponse(
                [ToolCall(f"c{r}{k}", "wait", {"s": s, "k": k}) for k, s in enumerate(waits)],
                ModelStop.tool_use,
                usage,
            )
            for r, waits in enumerate(self.tools)
        ]
        self.replies.append(ModelResponse([Text("done")], ModelStop.end_turn, usage))


class _Model:
    """The shape's replies in order: `acomplete` waits the shape's wait first, `complete`
    (for the sync executor) does not."""

    def __init__(self, shape: _Shape, sleep: Callable[[float], Awaitable[Any]]) -> None:
        self.shape, self.sleep, self.n = shape, sleep, 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.n += 1
        return self.shape.replies[self.n - 1]

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        self.n += 1
        await self.sleep(self.shape.model[self.n - 1])
        return self.shape.replies[self.n - 1]


def _async_tool(sleep: Callable[[float], Awaitable[Any]]) -> Tool:
    @tool(name="wait")
    async def wait(s: float, k: int) -> int:
        """Wait `s` seconds."""
        await sleep(s)
        return k

    return wait


@tool(name="wait")
def _sync_tool(s: float, k: int) -> int:
    """Wait `s` seconds (the sync executor's run does not)."""
    return k


def _checked(run: Any) -> None:
    if run.output != "done" or len(run.messages) != 2 * ROUNDS + 2:
        raise RuntimeError(f"the load run did not go as scripted: {run.stop_reason}")


# -- one run of each kind ------------------------------------------------------------------------


async def _bare_asyncio(shape: _Shape) -> None:
    sleep = asyncio.sleep
    for r in range(ROUNDS):
        await sleep(shape.model[r])
        await asyncio.gather(*(sleep(s) for s in shape.tools[r]))
    await sleep(shape.model[ROUNDS])


async def _bare_trio(shape: _Shape) -> None:
    sleep = trio.sleep
    for r in range(ROUNDS):
        await sleep(shape.model[r])
        async with trio.open_nursery() as nursery:
            for s in shape.tools[r]:
                nursery.start_soon(sleep, s)
    await sleep(shape.model[ROUNDS])


def _executor(
    backend: str, journals: Path | None = None, opened: dict[int, Journal] | None = None
) -> Callable[[_Shape, int], Awaitable[None]]:
    """`aio` doing one run: with a `Journal(fsync="never")` in `journals` that it opens and
    closes, or with the one `opened` holds for it (opening a file costs more than journaling
    a run: `_targets` shows both)."""
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep if backend == "asyncio" else trio.sleep
    tools = [_async_tool(sleep)]

    async def one(shape: _Shape, i: int) -> None:
        journal = None if journals is None else Journal(journals / f"{i}", fsync="never")
        if opened is not None:
            journal = opened[i]
        run = await aio.run(SPEC, "go", model=_Model(shape, sleep), tools=tools, journal=journal)
        if journals is not None and journal is not None:
            journal.close()
        _checked(run)

    return one


# -- a round: every run at once ------------------------------------------------------------------


def _round(backend: str, one: Callable[..., Awaitable[None]], shapes: list[_Shape]) -> float:
    """CPU seconds for `one` of every shape, all at once on `backend`."""

    async def on_asyncio() -> float:
        start = time.process_time()
        await asyncio.gather(*(one(s, i) for i, s in enumerate(shapes)))
        return time.process_time() - start

    async def on_trio() -> float:
        start = time.process_time()
        async with trio.open_nursery() as nursery:
            for i, s in enumerate(shapes):
                nursery.start_soon(one, s, i)
        return time.process_time() - start

    gc.collect()
    if backend == "asyncio":
        return asyncio.run(on_asyncio())
    return trio.run(on_trio)


def _sync_round(shapes: list[_Shape]) -> float:
    """CPU seconds for the sync executor doing every run, one after another, without waits."""
    gc.collect()
    start = time.process_time()
    for shape in shapes:
        _checked(sync.run(SPEC, "go", model=_Model(shape, asyncio.sleep), tools=[_sync_tool]))
    return time.process_time() - start


def _bare(backend: str) -> Callable[[_Shape, int], Awaitable[None]]:
    bare = _bare_asyncio if backend == "asyncio" else _bare_trio
    return lambda shape, i: bare(shape)


def _figure(values: list[float], scale: float = 1.0) -> Figure:
    return Figure.of([v * scale for v in values])


def _verdict(ratio: float, target: float) -> str:
    return f"{'pass' if ratio <= target else 'MISS'} (≤ {target:g}×)"


def _ratio(over: list[float], under: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(over, under, strict=True))


def _targets(n: int, repeats: int) -> list[Row]:
    """The issue's rows at `n` runs at once: each backend against its bare self, per run
    against the sync executor, and a journal per run against none."""
    shapes = [_Shape(i) for i in range(n)]
    found: list[Row] = []
    folder = Path(tempfile.mkdtemp(prefix="turnstile-load-"))
    try:
        for backend, target in (("asyncio", 2.0), ("trio", 1.5)):
            bare, plain = _bare(backend), _executor(backend)
            _round(backend, bare, shapes[:50]), _round(backend, plain, shapes[:50])  # warm up
            bares, plains, journals, kept, syncs = [], [], [], [], []
            for k in range(repeats):
                bares.append(_round(backend, bare, shapes))
                plains.append(_round(backend, plain, shapes))
                if backend == "asyncio":
                    (where := folder / str(k)).mkdir()
                    journals.append(_round(backend, _executor(backend, where), shapes))
                    shutil.rmtree(where)
                    (where := folder / f"{k}-kept").mkdir()
                    opened = {i: Journal(where / str(i), fsync="never") for i in range(n)}
                    kept.append(_round(backend, _executor(backend, opened=opened), shapes))
                    for journal in opened.values():
                        journal.close()
                    shutil.rmtree(where)
                syncs.append(_sync_round(shapes))
            base = statistics.median(bares)
            found.append(
                (
                    f"load · aio on {backend}, CPU s a round",
                    f"{n:,}",
                    str(_figure(plains)),
                    f"bare {backend} {base:.3f} → ×{_ratio(plains, bares):.2f}",
                    _verdict(_ratio(plains, bares), target),
                )
            )
            base = statistics.median(syncs) / n * 1e6
            found.append(
                (
                    f"load · aio on {backend}, CPU µs a run",
                    f"{n:,}",
                    str(_figure(plains, 1e6 / n)),
                    f"sync executor {base:,.0f} → ×{_ratio(plains, syncs):.2f}",
                    _verdict(_ratio(plains, syncs), 1.5),
                )
            )
            for how, values in (("opened in the run", journals), ("opened before", kept)):
                if values:
                    found.append(
                        (
                            f"load · aio on {backend} + Journal(never) {how}, CPU s a round",
                            f"{n:,}",
                            str(_figure(values)),
                            f"no journal {statistics.median(plains):.3f} → "
                            f"×{_ratio(values, plains):.2f}",
                            _verdict(_ratio(values, plains), 1.15),
                        )
                    )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return found


SERIES = ("sync executor", "bare asyncio", "aio asyncio", "bare trio", "aio trio")
"""The curve's lines, each CPU µs a run against how many run at once."""


def _curve(sizes: list[int], repeats: int) -> dict[str, dict[int, Figure]]:
    """CPU µs a run against how many run at once, for the sync executor, bare asyncio and trio,
    and `aio` on each (the graph's data), interleaved within each repeat."""
    warm = [_Shape(i) for i in range(50)]
    for backend in ("asyncio", "trio"):  # the first round of each pays for its imports
        _round(backend, _bare(backend), warm), _round(backend, _executor(backend), warm)
    found: dict[str, dict[int, Figure]] = {name: {} for name in SERIES}
    for n in sizes:
        shapes = [_Shape(i) for i in range(n)]
        per_run: dict[str, list[float]] = {name: [] for name in SERIES}
        for _ in range(repeats):
            per_run["sync executor"].append(_sync_round(shapes))
            for backend in ("asyncio", "trio"):
                for name, one in (("bare", _bare(backend)), ("aio", _executor(backend))):
                    per_run[f"{name} {backend}"].append(_round(backend, one, shapes))
        for name, values in per_run.items():
            found[name][n] = _figure(values, 1e6 / n)
    return found


def _curve_rows(curve: dict[str, dict[int, Figure]]) -> list[Row]:
    found: list[Row] = []
    for name, figures in curve.items():
        backend = name.split()[-1]
        base = curve.get(f"bare {backend}", curve["sync executor"])
        for n, figure in figures.items():
            found.append(
                (
                    f"load curve · {name}, CPU µs a run",
                    f"{n:,}",
                    str(figure),
                    "" if base is figures else f"×{figure.median / base[n].median:.2f} {backend}",
                    "(graph data)",
                )
            )
    return found


COLOURS = {
    "sync executor": "#555555",
    "bare asyncio": "#1f77b4",
    "aio asyncio": "#1f77b4",
    "bare trio": "#d62728",
    "aio trio": "#d62728",
}


def svg(curve: dict[str, dict[int, Figure]], note: str = "") -> str:
    """The curve as a small self-contained SVG: CPU µs a run (medians, min–max as a bar)
    against runs at once on a log axis; `bare` lines dashed."""
    w, h, left, right, top, bottom = 680, 380, 64, 150, 34, 48
    sizes = sorted({n for figures in curve.values() for n in figures})
    peak = max(f.high for figures in curve.values() for f in figures.values())
    step = next(s for s in (50, 100, 200, 250, 500, 1000, 2000, 5000, 1e4) if peak / s <= 8)
    top_y = step * math.ceil(peak / step)
    lo, hi = math.log(sizes[0]), math.log(sizes[-1])

    def x(n: float) -> float:
        return left + (math.log(n) - lo) / ((hi - lo) or 1) * (w - left - right)

    def y(v: float) -> float:
        return top + (1 - v / top_y) * (h - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="13">CPU µs a run (4 model calls, 6 tool calls) '
        f"against runs at once{_escape(note)}</text>",
    ]
    for k in range(int(top_y / step) + 1):
        v = k * step
        out.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            'stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:,.0f}</text>'
        )
    for n in sizes:
        out.append(f'<text x="{x(n):.1f}" y="{h - bottom + 18}" text-anchor="middle">{n:,}</text>')
    out.append(
        f'<text x="{(left + w - right) / 2:.0f}" y="{h - 10}" text-anchor="middle">'
        "runs at once (log scale)</text>"
        f'<text transform="translate(16 {(top + h - bottom) / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">CPU µs per run</text>'
    )
    for i, (name, figures) in enumerate(curve.items()):
        colour, dash = (
            COLOURS.get(name, "#000000"),
            ' stroke-dasharray="5 4"' * name.startswith("bare"),
        )
        points = " ".join(f"{x(n):.1f},{y(f.median):.1f}" for n, f in sorted(figures.items()))
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        for n, f in figures.items():
            out.append(
                f'<line x1="{x(n):.1f}" x2="{x(n):.1f}" y1="{y(f.low):.1f}" y2="{y(f.high):.1f}" '
                f'stroke="{colour}"/><circle cx="{x(n):.1f}" cy="{y(f.median):.1f}" r="3" '
                f'fill="{colour}"/>'
            )
        ly = top + 10 + 20 * i
        out.append(
            f'<line x1="{w - right + 12}" x2="{w - right + 40}" y1="{ly}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"{dash}/>'
            f'<text x="{w - right + 46}" y="{ly + 4}">{_escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def rows(sizes: list[int], times: int) -> list[Row]:
    """The load rows: 1,000 runs at once (100 with `--quick`, `times` 1), and the curve at 100,
    300, 1,000 and 3,000 (skipped with `--quick`)."""
    del sizes
    if times == 1:
        return _targets(100, 3)
    return _targets(1000, 5) + _curve_rows(_curve(list(CURVE), 3))


CURVE = (100, 300, 1000, 3000)
"""The curve's concurrencies."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.load")
    p.add_argument("--quick", action="store_true", help="100 runs at once, the curve smaller")
    p.add_argument("--graph", type=Path, help="also write the curve as an SVG there")
    p.add_argument("--repeats", type=int, default=5, help="rounds of each variant (default 5)")
    args = p.parse_args(argv)
    n, sizes = (100, [10, 30, 100]) if args.quick else (1000, list(CURVE))
    found = _targets(n, args.repeats)
    if args.graph is not None:
        curve = _curve(sizes, max(1, args.repeats - 2))
        found += _curve_rows(curve)
        args.graph.write_text(svg(curve, f" · {date.today()}"))
    for row in found:
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
