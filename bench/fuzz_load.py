"""`python -m bench.fuzz_load [N] [--seed S]`: damage state dumps N ways (50,000 by default) and
load each; print what happened.

The dumps are real: every step of every recorded conversation in `fixtures/`, replayed. Half the
inputs damage bytes (flips, cuts, insertions, truncation, repeats), which the checksum must
catch; half change one value of the state and forge a valid checksum, which the consistency
checks must catch or else load a state a loop can be in. Among the damage: depth bombs (3,000
levels of `[` or `{"a":`, cut short or whole, in the bytes or in a value of the state, and
nests just past and just short of what a dump may hold), and 10 MB (one input in `HUGE_EVERY`:
bytes put in, or a string of the state that long). Anything but `CorruptState` or a
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
from turnstile.core._decoding import MAX_DEPTH
from turnstile.core._state import state_problems
from turnstile.executors.testing import replay
from turnstile.providers.replay import load_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VALUES = [None, 0, -1, 1.5, "", "model-1", "done", "awaiting_tools", True, [], {}, "x" * 50]
DEEP = 3_000
BOMBS = [
    b"[" * DEEP,
    b'{"a":' * DEEP,
    b"[" * DEEP + b"]" * DEEP,
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
]
"""Depth bombs: cut short or whole, of arrays or objects."""
NESTS = [*BOMBS[2:], b"[" * (MAX_DEPTH - 4) + b"]" * (MAX_DEPTH - 4), b"[" * 200 + b"]" * 200]
"""Whole nests a forged state may hold: past, at and short of what a dump may nest."""
HUGE = 10_000_000
HUGE_EVERY = 200


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
    kind = rng.randrange(6)
    if kind == 5:
        return dump[:i] + rng.choice(BOMBS) + dump[i:]
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


def forged(rng: random.Random, dump: bytes, huge: bool = False) -> bytes:
    """One value of the state changed, under a checksum made to match: to another value, to a
    deep nest (written in after `json.dumps`, which could not write it), or to 10 MB of text."""
    state = json.loads(dump)["state"]
    place = rng.choice([p for p in _places(state) if p])
    nest = b""
    if huge:
        _set(state, place, "x" * HUGE)
    elif rng.random() < 0.1:
        nest = rng.choice(NESTS)
        _set(state, place, _MARK)
    else:
        _set(state, place, rng.choice(VALUES))
    body = json.dumps(state, separators=(",", ":")).encode()
    body = body.replace(b'"%s"' % _MARK.encode(), nest) if nest else body
    return b'{"schema":2,"checksum":"%08x","state":%s}' % (zlib.crc32(body), body)


_MARK = "\u2603nest\u2603"


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
    untyped = 0
    for i in range(args.n):
        spec, dump = rng.choice(sources)
        way = "bytes" if i % 2 == 0 else "forged"
        huge = rng.randrange(HUGE_EVERY) == 0
        if way == "bytes":
            data = damaged_bytes(rng, dump)
            if huge:
                at = rng.randrange(len(data) + 1)
                fill = rng.choice([b" ", b"x", b"[", b"1,", b'"a",'])
                data = data[:at] + fill * (HUGE // len(fill)) + data[at:]
        else:
            data = forged(rng, dump, huge)
        counts["10 MB inputs"] += huge
        started = time.perf_counter()
        try:
            loop = Loop.load(spec, data)
        except CorruptState:
            counts[f"{way}: CorruptState"] += 1
        except Exception as e:  # anything untyped is what this script looks for
            untyped += 1
            failures.append(f"{way}: {type(e).__name__}: {e}")
        else:
            problems = state_problems(loop.state)
            stuck = loop.state.phase not in ("idle", "done") and not loop.outstanding_commands()
            if problems or stuck:
                failures.append(f"{way}: loaded a state no loop can be in: {problems}")
            try:  # what loads is a run: it dumps, and the dump loads
                Loop.load(spec, loop.dump())
            except Exception as e:
                untyped += 1
                failures.append(f"{way}: loaded, but its dump does not: {type(e).__name__}: {e}")
            unchanged = way == "bytes" and loop.state == Loop.load(spec, dump).state
            counts[f"{way}: loaded" + (" (unchanged)" if unchanged else "")] += 1
        elapsed = time.perf_counter() - started
        if len(data) < 10_000:
            slowest = max(slowest, elapsed)
    print(f"{args.n:,} damaged dumps from {len(sources)} real ones (seed {args.seed}):")
    for outcome, count in sorted(counts.items()):
        print(f"  {outcome:<32} {count:>8,}")
    print(f"  {'untyped errors':<32} {untyped:>8,}")
    print(f"  slowest load under 10 KB: {slowest * 1000:.1f} ms")
    for failure in failures[:20]:
        print(f"  FAILURE {failure}")
    return 1 if failures or slowest > 0.1 else 0


if __name__ == "__main__":
    sys.exit(main())
