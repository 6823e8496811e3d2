"""Instructions per turn of the core `Loop`, counted by callgrind: deterministic, unlike time.

`python -m bench.instructions` runs this module's `drive` under valgrind twice (20 and 120 turns
of one tool call each, every guard on, `PYTHONHASHSEED=0`, no address randomisation) and prints
the difference divided by 100: what one more turn costs, start-up and imports cancelled out.
Both runs build the same 120 replies, so building them is cancelled out too. `--by-n` also
prints what a turn costs after 10, 100, 1,000 and 10,000 turns (over as many more turns, at
least 100): flat in N or not, without a clock.
"""

from __future__ import annotations

__all__ = ["by_n", "drive", "instructions", "main"]

import os
import re
import subprocess
import sys
import tempfile

SMALL, LARGE = 20, 120
SIZES = (10, 100, 1_000, 10_000)
MORE = 100


def drive(n: int, built: int = LARGE) -> None:
    """`n` turns through `Loop` by hand: a reply with one tool call, then its result (the
    replies of `built` turns made first, whatever `n`, so two runs build the same)."""
    from turnstile.core import ModelReplied, ToolReturned

    from .core import SPEC, Loop, _replies

    replies = _replies(built)
    loop = Loop(SPEC)
    [ask] = loop.start("go", 0.0)
    for i in range(n):
        [run] = loop.send(ModelReplied(ask.id, replies[i], now=float(i)))
        [ask] = loop.send(ToolReturned(run.id, "ok", now=float(i)))


def instructions(n: int, built: int = LARGE) -> int:
    """The instructions a whole process driving `n` turns executes, by callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = [
            *("setarch", os.uname().machine, "-R", "valgrind", "--tool=callgrind"),
            f"--callgrind-out-file={out}",
            *(sys.executable, "-m", "bench.instructions", "--drive", str(n), str(built)),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, env=env, check=True, capture_output=True)
        with open(out) as f:
            totals = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.MULTILINE)
    assert totals is not None, "callgrind wrote no totals"
    return int(totals.group(1))


def by_n(n: int) -> float:
    """Instructions a turn of the turns after the first `n` (`n` of them, at least `MORE`): so
    a full garbage collection, which comes once in many thousand turns, is shared among as
    many turns as it is in a run of that length, not all charged to a hundred."""
    more = max(MORE, n)
    return (instructions(n + more, n + more) - instructions(n, n + more)) / more


def main(argv: list[str]) -> None:
    if argv[:1] == ["--drive"]:
        drive(int(argv[1]), int(argv[2]))
        return
    small, large = instructions(SMALL), instructions(LARGE)
    per_turn = (large - small) / (LARGE - SMALL)
    print(f"instructions per turn (one tool call, every guard on): {per_turn:,.0f}")
    if "--by-n" in argv:
        first = by_n(SIZES[0])
        print(f"  after {SIZES[0]:,} turns: {first:,.0f}")
        for n in SIZES[1:]:
            figure = by_n(n)
            print(f"  after {n:,} turns: {figure:,.0f} (×{figure / first:.3f})")


if __name__ == "__main__":
    main(sys.argv[1:])
