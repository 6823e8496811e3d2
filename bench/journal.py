"""What a journal costs: µs per turn of a run with two tool calls a turn, for each fsync policy,
against two baselines measured in the same run, interleaved: the same run with no journal, and
the same bytes a turn appended bare, a `write` a record and one `fdatasync` (what making a turn
durable costs at the least), each run's ratio to the bare one beside it; the data syncs each
policy makes a turn; and the bytes a turn takes on disk.

The tools are replay-safe (a lookup), so `"round"` makes one sync a turn with the sync
executor too; a row with tools that are not shows the sync per call it keeps there, and one
with the asyncio executor, which starts a round's calls together, its one sync a turn anyway.
"""

from __future__ import annotations

__all__ = ["rows"]

import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from turnstile.core import Guards, LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Journal, ScriptedModel, aio, sync

from ._measure import Figure

Row = tuple[str, str, str, str, str]
POLICIES = ("never", "batch", "round", "always")
TARGET = 1.3
"""`"round"` a turn against a bare fdatasync of its bytes, at most."""


@tool(replay_safe=True)
def lookup(key: str) -> str:
    """Look a key up: harmless to run again."""
    return f"value of {key}"


@tool(name="lookup")
def once(key: str) -> str:
    """Look a key up, as a tool that says nothing of running twice."""
    return f"value of {key}"


def _replies(turns: int) -> list[ModelResponse]:
    """`turns` turns of two calls each, then an answer: a run of `2 * turns + 1` events more
    than the turns (a start, each turn's reply, each call's start and result)."""
    usage = Usage(120, 30)
    calls = [
        ModelResponse(
            [
                Text("looking"),
                ToolCall(f"a{i}", "lookup", {"key": f"k{i}"}),
                ToolCall(f"b{i}", "lookup", {"key": f"j{i}"}),
            ],
            ModelStop.tool_use,
            usage,
        )
        for i in range(turns)
    ]
    return [*calls, ModelResponse([Text("done")], ModelStop.end_turn, usage)]


SPEC = LoopSpec(guards=Guards(max_turns=10_000))


@contextmanager
def _counted() -> Iterator[list[float]]:
    """The seconds each data sync made inside took (either call the OS offers)."""
    calls: list[float] = []
    real = {name: getattr(os, name) for name in ("fsync", "fdatasync") if hasattr(os, name)}

    def timed(fd: int, fn: Callable[[int], None]) -> None:
        start = time.perf_counter()
        fn(fd)
        calls.append(time.perf_counter() - start)

    for name, fn in real.items():
        setattr(os, name, lambda fd, fn=fn: timed(fd, fn))
    try:
        yield calls
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)


class _Case:
    """One way to run the bench's run: its executor, tools, and journal policy (None: none)."""

    def __init__(self, policy: str | None, tool: Any = lookup, executor: str = "sync") -> None:
        self.policy, self.tool, self.executor = policy, tool, executor

    def run(self, turns: int, folder: Path) -> tuple[float, float, int, int, int]:
        """µs per turn of one run and of its data syncs, the syncs (the journal's creation
        aside), and the journal's size and records (0 without one)."""
        path = folder / f"{self.policy}-{time.perf_counter_ns()}.journal"
        journal = None
        if self.policy is not None:
            Journal(path).close()  # created (and its name synced) outside the timing
            journal = Journal(path, fsync=self.policy)  # type: ignore[arg-type]
        model = ScriptedModel(_replies(turns))
        tools = [self.tool]
        with _counted() as syncs:
            start = time.perf_counter()
            if self.executor == "sync":
                sync.run(SPEC, "go", model=model, tools=tools, journal=journal)
            else:

                async def main() -> None:
                    await aio.run(SPEC, "go", model=model, tools=tools, journal=journal)

                anyio.run(main)
            if journal is not None:
                journal.close()
            elapsed = time.perf_counter() - start
        size, records = 0, 0
        if journal is not None:
            size, records = path.stat().st_size, len(journal.events)
            os.unlink(path)
        per_turn = 1e6 / (turns + 1)
        return elapsed * per_turn, sum(syncs) * per_turn, len(syncs), size, records


def _bare_us(turns: int, size: int, records: int, folder: Path) -> tuple[float, float]:
    """µs per turn of appending a turn's bytes to a file, in as many writes as it has records
    (each handed to the OS as it comes, as a journal must), and one `fdatasync`; and of the
    syncs alone."""
    path = folder / f"bare-{time.perf_counter_ns()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.fdatasync(fd)
        writes = max(1, round(records / (turns + 1)))
        data = b"x" * max(1, size // (turns + 1) // writes)
        synced = 0.0
        start = time.perf_counter()
        for _ in range(turns + 1):
            for _ in range(writes):
                os.write(fd, data)
            at = time.perf_counter()
            os.fdatasync(fd)
            synced += time.perf_counter() - at
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return elapsed / (turns + 1) * 1e6, synced / (turns + 1) * 1e6


def rows(sizes: list[int], times: int) -> list[Row]:
    turns = min(max(sizes), 100)
    cases = {
        "no journal": _Case(None),
        **{f"fsync={p!r}": _Case(p) for p in POLICIES},
        "fsync='round', tools not replay-safe": _Case("round", once),
        "fsync='round', tools not replay-safe, asyncio": _Case("round", once, "asyncio"),
    }
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as folder:
        where = Path(folder)
        counts = {name: case.run(turns, where)[2] for name, case in cases.items()}  # warm up
        _, _, _, size, records = cases["fsync='never'"].run(turns, where)
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in ["bare", *cases]}
        measures: dict[str, Callable[[], tuple[float, float]]] = {
            "bare": lambda: _bare_us(turns, size, records, where),
            **{name: lambda c=case: c.run(turns, where)[:2] for name, case in cases.items()},
        }
        for _ in range(max(times, 5)):  # interleaved: the load of the moment hits all alike
            for name, measure in measures.items():
                gc.collect()
                timings[name].append(measure())
        bare = Figure.of([t for t, _ in timings["bare"]])
        bare_sync = statistics.median(s for _, s in timings["bare"])
        plain = Figure.of([t for t, _ in timings["no journal"]])
        out.append(
            (
                "journal turn µs, bare: a write a record, one fdatasync",
                str(turns),
                str(bare),
                f"{bare_sync:.0f} µs of it in the fdatasync",
                "",
            )
        )
        out.append(("journal turn µs, sync, no journal", str(turns), str(plain), "", ""))
        for name, case in cases.items():
            if case.policy is None:
                continue
            runs = timings[name]
            figure = Figure.of([t for t, _ in runs])
            ratio = statistics.median(  # each run against the bare one beside it
                t / b for (t, _), (b, _) in zip(runs, timings["bare"], strict=True)
            )
            synced = statistics.median(s for _, s in runs)
            target = ""
            if name == "fsync='round'":
                target = f"{'pass' if ratio <= TARGET else 'MISS'} (≤ ×{TARGET} bare)"
            label = name if case.executor == "asyncio" else f"sync, {name}"
            out.append(
                (
                    f"journal turn µs, {label}",
                    str(turns),
                    str(figure),
                    f"bare ×{ratio:.2f}; {counts[name] / (turns + 1):.2f} syncs a turn, "
                    f"{synced:.0f} µs; no journal ×{figure.median / plain.median:.1f}",
                    target,
                )
            )
        out.append(
            (
                "journal bytes per turn (2 tool calls)",
                str(turns),
                f"{size / (turns + 1):,.0f}",
                f"{size:,} bytes for {turns + 1} turns",
                "",
            )
        )
    return out


if __name__ == "__main__":
    for row in rows([10, 100], 9):
        print(" | ".join(row))
