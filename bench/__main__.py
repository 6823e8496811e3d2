"""`python -m bench [--quick]`: one table, every figure a median over repeats with its spread.

Every comparison is a ratio against a baseline measured in the same run; targets are reported
as pass/miss, never asserted.
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import date

from . import (
    aio,
    caching,
    core,
    egress,
    executors,
    fork,
    journal,
    load,
    longrun,
    peers,
    providers,
    simulate,
    temporal,
    tracing,
    view,
    workspace,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--quick", action="store_true", help="small N, one repetition (for CI)")
    args = p.parse_args(argv)
    sizes, times = ([10, 50], 1) if args.quick else ([10, 100, 1000], 9)
    rows = core.rows(sizes, times) + providers.rows(sizes, times) + executors.rows(sizes, times)
    rows += egress.rows(sizes, times)
    rows += aio.rows(sizes, times) + load.rows(sizes, times)
    rows += journal.rows(sizes, times)
    rows += fork.rows(sizes, times)
    rows += tracing.rows(sizes, times)
    rows += caching.rows(sizes, times)
    rows += longrun.rows(sizes, times)
    rows += temporal.rows(sizes, times)
    rows += view.rows(sizes, times)
    rows += simulate.rows(sizes, times)
    rows += workspace.rows(sizes, times)
    if args.quick:
        rows.append(
            ("peers", "", "skipped in --quick (importing them alone takes seconds)", "", "")
        )
    else:
        rows += peers.rows(sizes, times)
    header = ("measure", "N", "median (min–max)", "baseline, same run", "target")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(
        f"turnstile bench · {date.today()} · Python {sys.version.split()[0]} · {platform.machine()}"
    )
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
