"""What a fork costs: `fork(JOURNAL, at, journal=BRANCH)` cutting a 10,000-event journal in the
middle (what `turnstile fork` does: the parent's records copied behind a header, nothing decoded
or replayed), against reading the same journal alone (`Journal.read`), measured in the same
run, interleaved; and a fork into a loop (the first half replayed), for scale.
"""

from __future__ import annotations

__all__ = ["rows"]

import gc
import statistics
import tempfile
import time
from pathlib import Path

from turnstile.executors import Journal, ScriptedModel, fork, sync

from ._measure import Figure
from .journal import SPEC, _replies, lookup

Row = tuple[str, str, str, str, str]
EVENTS = 10_000
TARGET_MS = 50.0


def _parent(folder: Path) -> Path:
    """A journal of 10,002 events: 2,000 turns of two tool calls, then an answer."""
    path = folder / "parent.journal"
    turns = EVENTS // 5
    with Journal(path, fsync="never") as journal:
        sync.run(SPEC, "go", model=ScriptedModel(_replies(turns)), tools=[lookup], journal=journal)
    return path


def _ms(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1e3


def rows(sizes: list[int], times: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as folder:
        where = Path(folder)
        parent = _parent(where)
        n = len(Journal.read(parent))
        branch = where / "branch.journal"
        measures = {
            "read": lambda: Journal.read(parent),
            "fork": lambda: fork(parent, n // 2, journal=branch),
            "loop": lambda: fork(parent, n // 2, spec=SPEC),
        }
        timings: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(times):  # interleaved: the load of the moment hits all alike
            for name, measure in measures.items():
                gc.collect()
                timings[name].append(_ms(measure))
    read, cut, loop = (Figure.of(timings[k]) for k in ("read", "fork", "loop"))
    ratio = statistics.median(f / r for f, r in zip(timings["fork"], timings["read"], strict=True))
    verdict = "pass" if cut.median <= TARGET_MS else "MISS"
    return [
        ("fork ms, read the journal alone (Journal.read)", str(n), str(read), "", ""),
        (
            "fork ms, in the middle, into a journal",
            str(n),
            str(cut),
            f"read alone ×{ratio:.2f}",
            f"{verdict} (≤ {TARGET_MS:.0f} ms)",
        ),
        (
            "fork ms, in the middle, into a loop (half replayed)",
            str(n),
            str(loop),
            f"read alone ×{loop.median / read.median:.2f}",
            "",
        ),
    ]


if __name__ == "__main__":
    for row in rows([10, 100], 5):
        print(" | ".join(row))
