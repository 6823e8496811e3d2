"""What a journal costs: µs per turn of a sync run with tools, for each fsync policy, against
the same run with no journal, measured in the same run; and the bytes a turn takes on disk."""

from __future__ import annotations

__all__ = ["rows"]

import os
import tempfile
import time
from pathlib import Path

from turnstile.core import Guards, LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Journal, ScriptedModel, sync

from ._measure import repeat

Row = tuple[str, str, str, str, str]


@tool
def lookup(key: str) -> str:
    """Look a key up."""
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


SPEC = LoopSpec(tools=(lookup.spec,), guards=Guards(max_turns=10_000))


def _run_us(turns: int, policy: str | None, folder: Path) -> tuple[float, int]:
    """µs per turn of one run, and the journal's size (0 without one)."""
    path = folder / f"{policy}-{time.perf_counter_ns()}.journal"
    journal = None if policy is None else Journal(path, fsync=policy)  # type: ignore[arg-type]
    model = ScriptedModel(_replies(turns))
    start = time.perf_counter()
    sync.run(SPEC, "go", model=model, tools=[lookup], journal=journal)
    elapsed = time.perf_counter() - start
    if journal is None:
        return elapsed / (turns + 1) * 1e6, 0
    journal.close()
    size = path.stat().st_size
    os.unlink(path)
    return elapsed / (turns + 1) * 1e6, size


def rows(sizes: list[int], times: int) -> list[Row]:
    turns = max(sizes) if max(sizes) <= 100 else 100
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as folder:
        where = Path(folder)
        bare = repeat(lambda: _run_us(turns, None, where)[0], times, warm_up=True)
        out.append(
            ("sync turn µs, no journal (2 tool calls)", str(turns), str(bare), "baseline", "")
        )
        for policy in ("never", "batch", "always"):
            figure = repeat(lambda p=policy: _run_us(turns, p, where)[0], times)
            out.append(
                (
                    f"sync turn µs, journal fsync={policy!r}",
                    str(turns),
                    str(figure),
                    f"no journal {bare.median:.1f} → ×{figure.median / bare.median:.2f}",
                    "",
                )
            )
        size = _run_us(turns, "never", where)[1]
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
