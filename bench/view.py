"""What `turnstile view` costs: milliseconds to write the HTML page of a journaled run (two tool
calls a turn, as the journal bench's), and the page's size, against `turnstile show` of the same
journal (its text transcript) in the same run. Both read and replay the journal."""

from __future__ import annotations

__all__ = ["rows"]

import contextlib
import os
import tempfile
import time
from pathlib import Path

import msgspec
from turnstile.executors import ScriptedModel, cli, sync

from ._measure import repeat
from .journal import SPEC, _replies, lookup

Row = tuple[str, str, str, str, str]
TARGET_S, TARGET_MB = 2.0, 5.0
"""`view` of a 1,000-turn run: at most 2 s and 5 MB."""


def _ms(argv: list[str]) -> float:
    with open(os.devnull, "w") as out, contextlib.redirect_stdout(out):
        start = time.perf_counter()
        assert cli.main(argv) == 0
        return (time.perf_counter() - start) * 1e3


def rows(sizes: list[int], times: int) -> list[Row]:
    turns = 50 if max(sizes) < 1000 else 1000  # --quick: a small run, so the row cannot rot
    with tempfile.TemporaryDirectory() as folder:
        journal, page = str(Path(folder) / "run.journal"), Path(folder) / "run.html"
        spec = Path(folder) / "spec.json"  # its guards allow the run's turns
        spec.write_bytes(msgspec.json.encode(SPEC))
        sync.run(SPEC, "go", model=ScriptedModel(_replies(turns)), tools=[lookup], journal=journal)
        given = ["--spec", str(spec)]
        show = repeat(lambda: _ms(["show", journal, *given]), times, warm_up=True)
        view = repeat(lambda: _ms(["view", journal, "-o", str(page), *given]), times, warm_up=True)
        mb = page.stat().st_size / 1e6
    target = f"≤ {TARGET_S * 1e3:,.0f} ms at 1,000 turns"
    if turns == 1000:
        target += ": pass" if view.median <= TARGET_S * 1e3 else ": miss"
    size = f"≤ {TARGET_MB:g} MB at 1,000 turns"
    if turns == 1000:
        size += ": pass" if mb <= TARGET_MB else ": miss"
    return [
        ("show of a journaled run, ms", str(turns), str(show), "baseline", ""),
        ("view of it as HTML, ms", str(turns), str(view), f"show ×{view.median / show.median:.1f}",
         target),
        ("view's page, MB", str(turns), f"{mb:.2f}", f"{mb * 1e3 / turns:.2f} kB a turn", size),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in rows([10, 100, 1000], 5):
        print(" | ".join(row))
