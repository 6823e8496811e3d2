"""`python -m bench.fuzz_load [N] [--seed S]`: damage state dumps N ways (50,000 by default) and
load each; print what happened.

The dumps are real: every step of every recorded conversation in `fixtures/`, replayed. Half the
inputs damage bytes (flips, cuts, insertions, truncation, repeats), which the checksum must
catch; half change one value of the state and forge a valid checksum, which the consistency
checks must catch or else load a state a loop can be in. Anything but `CorruptState` or a
consistent loop is a failure, and so is a load slower than 100 ms for a dump under 10 KB. Needs
the test extras (`pip install -e '.[test]'`): the traces replay through the SDK clients.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from turnstile.core import CorruptState, Loop, LoopSpec, Started
from turnstile.core._state import state_problems
from turnstile.executors.testing import replay
from turnstile.providers.replay import load_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VALUES = [None, 0, -1, 1.5, "", "model-1", "done", "awaiting_tools", True, [], {}, "x" * 50]


def dumps() -> list[tuple[LoopSpec, bytes]]:
    """A dump after every step of every fixture's replay."""
    found: list[tuple[LoopSpec, bytes]] = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        trace = load_trace(path)
        if trace.loop is None:
            continue
        run = replay(trace)
        spec = run.loop.spec
        loop = Loop(spec)
        for event in run.state.events:  # the same run again, dumped after each event
            if type(event) is Started:
                loop.start(event.messages, event.now)
            else:
                loop.send(event)
            found.append((spec, loop.dump()))
    return found


def damaged_bytes(rng: random.Random, dump: bytes) -> bytes:
    i = rng.randrange(len(dump))
    kind = rng.randrange(5)
    if kind == 0:
        return dump[:i] + bytes([dump[i] ^ (1 << rng.randrange(8))]) + dump[i + 1 :]
    if kind == 1:
        return dump[:i] + dump[i + 1 :]
    if kind == 2:
        return dump[:i] + rng.choice([b"0", b"{", b'"', b"null", b","]) + dump[i:]
    if kind == 3:
        return dump[:i]
    return dump[:i] + dump[i:][: rng.randrange(1, 40)] * 2 + dump[i:]


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    places = [path]
    if isinstance(value, dict):
        items: Any = value.items()
    else:
        items = enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        places += _places(item, (*path, key))
    return places


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


def forged(rng: random.Random, dump: bytes) -> bytes:
    """One value of the state changed, under a checksum made to match."""
    state = json.loads(dump)["state"]
    place = rng.choice([p for p in _places(state) if p])
    _set(state, place, rng.choice(VALUES))
    body = json.dumps(state, separators=(",", ":")).encode()
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(body), body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz_load")
    p.add_argument("n", type=int, nargs="?", default=50_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    sources = dumps()
    counts: collections.Counter[str] = collections.Counter()
    slowest = 0.0
    failures: list[str] = []
    for i in range(args.n):
        spec, dump = rng.choice(sources)
        way = "bytes" if i % 2 == 0 else "forged"
        data = damaged_bytes(rng, dump) if way == "bytes" else forged(rng, dump)
        started = time.perf_counter()
        try:
            loop = Loop.load(spec, data)
        except CorruptState:
            counts[f"{way}: CorruptState"] += 1
        except Exception as e:  # anything untyped is what this script looks for
            failures.append(f"{way}: {type(e).__name__}: {e}")
        else:
            problems = state_problems(loop.state)
            stuck = loop.state.phase not in ("idle", "done") and not loop.outstanding_commands()
            if problems or stuck:
                failures.append(f"{way}: loaded a state no loop can be in: {problems}")
            unchanged = way == "bytes" and loop.state == Loop.load(spec, dump).state
            counts[f"{way}: loaded" + (" (unchanged)" if unchanged else "")] += 1
        elapsed = time.perf_counter() - started
        if len(data) < 10_000:
            slowest = max(slowest, elapsed)
    print(f"{args.n:,} damaged dumps from {len(sources)} real ones (seed {args.seed}):")
    for outcome, count in sorted(counts.items()):
        print(f"  {outcome:<32} {count:>8,}")
    print(f"  slowest load under 10 KB: {slowest * 1000:.1f} ms")
    for failure in failures[:20]:
        print(f"  FAILURE {failure}")
    return 1 if failures or slowest > 0.1 else 0


if __name__ == "__main__":
    sys.exit(main())
