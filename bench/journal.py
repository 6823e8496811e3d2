"""What a journal costs: µs per turn of a run with two tool calls a turn, for each fsync policy,
against baselines measured in the same run, interleaved: the same run with no journal; the same
run with a bare journal in its place, which writes the bytes the real one wrote (a `write` a
record) and makes an `fdatasync` wherever the real one syncs (the least the policy's durability
can cost: the ratio the target is on); and, with no run around them, a turn's bytes written and
one `fdatasync` (what making a turn durable costs at the least). Also the data syncs each policy
makes a turn, and the bytes a turn takes on disk. Each row names the file system it ran on:
`python -m bench.journal [FOLDER ...]` runs it in each folder given (a disk, a tmpfs).

The tools are replay-safe (a lookup), so `"round"` makes one sync a turn with the sync
executor too; a row with tools that are not shows the sync per call it keeps there, and one
with the asyncio executor, which starts a round's calls together, its one sync a turn anyway.
"""

from __future__ import annotations

__all__ = ["rows"]

import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from turnstile.core import Event, Guards, LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Journal, ScriptedModel, aio, sync

from ._measure import Figure

Row = tuple[str, str, str, str, str]
POLICIES = ("never", "batch", "round", "always")
TARGET = 1.3
"""A policy's journaled turn against the same turn with a bare journal, at most."""
HEADER = 22
"""A journal's header: its records follow."""


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


class _Bare:
    """The least a journal can do, in a journal's place: each append writes the next of
    `records` (the bytes a real journal wrote for the same run) in one `write`, and it makes
    an `fdatasync` wherever a journal of its policy syncs (each append under "always", a
    commit with something new under the others but "never")."""

    def __init__(self, path: Path, fsync: str, records: list[bytes]) -> None:
        self.path, self.fsync, self.events = path, fsync, list[Event]()
        self._records = iter(records)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._new = False

    def append(self, event: Event) -> None:
        os.write(self._fd, next(self._records))
        self._new = True
        if self.fsync == "always":
            self.commit()

    def commit(self) -> None:
        if self._new and self.fsync != "never":
            os.fdatasync(self._fd)
        self._new = False

    def close(self) -> None:
        self.commit()
        os.close(self._fd)


def _records(data: bytes) -> list[bytes]:
    """A journal's records, as written (each a frame of 12 bytes and its payload)."""
    out, pos = [], HEADER
    while pos < len(data):
        end = pos + 12 + int.from_bytes(data[pos : pos + 4], "little")
        out.append(data[pos:end])
        pos = end
    return out


class _Case:
    """One way to run the bench's run: its executor, tools, and journal policy (None: none);
    `records`, once set, makes it journal bare (`_Bare`)."""

    def __init__(self, policy: str | None, tool: Any = lookup, executor: str = "sync") -> None:
        self.policy, self.tool, self.executor = policy, tool, executor
        self.records: list[bytes] | None = None

    def bare(self, records: list[bytes]) -> _Case:
        """This case with a bare journal that writes `records`."""
        twin = _Case(self.policy, self.tool, self.executor)
        twin.records = records
        return twin

    def run(self, turns: int, folder: Path) -> tuple[float, float, int, bytes]:
        """µs per turn of one run and of its data syncs, the syncs (the journal's creation
        aside), and the journal's bytes (none without one)."""
        path = folder / f"{self.policy}-{time.perf_counter_ns()}.journal"
        journal: Any = None
        if self.policy is not None:
            Journal(path).close()  # created (and its name synced) outside the timing
            if self.records is None:
                journal = Journal(path, fsync=self.policy)  # type: ignore[arg-type]
            else:
                journal = _Bare(path, self.policy, self.records)
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
        data = b""
        if journal is not None:
            data = path.read_bytes()
            os.unlink(path)
        per_turn = 1e6 / (turns + 1)
        return elapsed * per_turn, sum(syncs) * per_turn, len(syncs), data


def _floor_us(turns: int, size: int, records: int, folder: Path) -> tuple[float, float]:
    """µs per turn of appending a turn's bytes to a file, in as many writes as it has records
    (each handed to the OS as it comes, as a journal must), and one `fdatasync`, with no run
    around them; and of the syncs alone."""
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


def _file_system(folder: Path) -> str:
    """The type of the file system `folder` is on (Linux's mount table), else its path."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return str(folder)
    real = str(folder.resolve())
    under = [
        (point, kind) for point, kind in mounts if (real + "/").startswith(point.rstrip("/") + "/")
    ]
    return max(under, key=lambda m: len(m[0]))[1] if under else str(folder)


def rows(sizes: list[int], times: int, folder: str | None = None) -> list[Row]:
    turns = min(max(sizes), 100)
    cases = {
        "no journal": _Case(None),
        **{f"fsync={p!r}": _Case(p) for p in POLICIES},
        "fsync='round', tools not replay-safe": _Case("round", once),
        "fsync='round', tools not replay-safe, asyncio": _Case("round", once, "asyncio"),
    }
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-", dir=folder) as name:
        where = Path(name)
        disk = _file_system(where)
        warm = {name: case.run(turns, where) for name, case in cases.items()}
        counts = {name: syncs for name, (_, _, syncs, _) in warm.items()}
        written = warm["fsync='never'"][3]
        records = len(_records(written))
        measures: dict[str, Callable[[], tuple[float, float]]] = {
            "floor": lambda: _floor_us(turns, len(written) - HEADER, records, where)
        }
        for name, case in cases.items():
            measures[name] = lambda c=case: c.run(turns, where)[:2]
            if case.policy is not None:
                twin = case.bare(_records(warm[name][3]))
                measures[f"bare {name}"] = lambda c=twin: c.run(turns, where)[:2]
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in measures}
        for _ in range(max(times, 5)):  # interleaved: the load of the moment hits all alike
            for name, measure in measures.items():
                gc.collect()
                timings[name].append(measure())
        floor = Figure.of([t for t, _ in timings["floor"]])
        floor_sync = statistics.median(s for _, s in timings["floor"])
        plain = Figure.of([t for t, _ in timings["no journal"]])
        out.append(
            (
                f"journal turn µs, on {disk}, floor: a turn's bytes, a write a record, one "
                "fdatasync (no run)",
                str(turns),
                str(floor),
                f"{floor_sync:.0f} µs of it in the fdatasync",
                "",
            )
        )
        out.append(
            (f"journal turn µs, on {disk}, sync, no journal", str(turns), str(plain), "", "")
        )
        for name, case in cases.items():
            if case.policy is None:
                continue
            runs, bare = timings[name], timings[f"bare {name}"]
            figure = Figure.of([t for t, _ in runs])
            ratio = statistics.median(  # each run against the bare one beside it
                t / b for (t, _), (b, _) in zip(runs, bare, strict=True)
            )
            synced = statistics.median(s for _, s in runs)
            target = ""
            if name in ("fsync='batch'", "fsync='round'"):
                target = f"{'pass' if ratio <= TARGET else 'MISS'} (≤ ×{TARGET} bare)"
            label = name if case.executor == "asyncio" else f"sync, {name}"
            out.append(
                (
                    f"journal turn µs, on {disk}, {label}",
                    str(turns),
                    str(figure),
                    f"bare journal ×{ratio:.2f} ({statistics.median(t for t, _ in bare):,.0f}"
                    f" µs); {counts[name] / (turns + 1):.2f} syncs a turn, {synced:.0f} µs; "
                    f"no journal ×{figure.median / plain.median:.1f}; over it "
                    f"×{(figure.median - plain.median) / floor.median:.2f} the floor",
                    target,
                )
            )
        out.append(
            (
                "journal bytes per turn (2 tool calls)",
                str(turns),
                f"{len(written) / (turns + 1):,.0f}",
                f"{len(written):,} bytes for {turns + 1} turns",
                "",
            )
        )
    return out


if __name__ == "__main__":
    for folder in sys.argv[1:] or [None]:
        for row in rows([10, 100], 9, folder):
            print(" | ".join(row))
