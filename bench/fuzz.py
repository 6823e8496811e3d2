"""`python -m bench.fuzz [--inputs 50000] [--seed 1]`: the codecs against mutated real replies.

Every reply recorded in `fixtures/` (bodies and event streams, of all three formats), with an
error body of each format, is a seed. Each input is a seed changed by one to three random
mutations, sent through one way in:

- `decode`: a codec's `decode` on a mutated body (a value replaced by one of another type, a
  null, a huge or negative number, a lone surrogate, a nest 3,000 deep as a value or as text
  (tool arguments, `[[[...`, `{"a":{"a":...`); a key dropped; a `type` swapped for another
  seen anywhere in the seeds; an array's items dropped, doubled or swapped);
- `stream`: a codec's `StreamAccumulator` fed a stream's events, some mutated as above, some
  dropped, doubled, moved or taken from another stream of the same format, then `result()`;
- `bytes`: the client's own reading of raw bytes (`read_body` for a body, `StreamReader` for an
  event stream in random chunks) after bytes are cut, doubled, flipped or inserted (a depth
  bomb among them).

One input in `HUGE_EVERY` is made 10 MB long instead: a string in it holds 10 MB of text, or
10 MB of bytes (text, nesting, a long array) go into its bytes.

An input passes when it gives a reply or raises `DecodeError` or `ProviderError`, within
`LIMIT_MS` if it is under 10 KB, and when what it gives can go into a run: its deltas encode as
JSON (no lone surrogate), an error's `retry_after` is None or a finite number of seconds, and a
loop that is handed the reply (`ModelReplied`) or the failure (`ModelFailed`) takes it, dumps its
state and loads it again. The script prints the counts (inputs by way in, outcomes, the kinds
of `ProviderError`, the slowest input) and every input that failed, and exits 1 if one did.
The test suite runs 2,000 of the same inputs (`run`).
"""

from __future__ import annotations

__all__ = ["Failure", "Report", "run"]

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec
from turnstile.core import Loop, LoopSpec, ModelFailed, ModelReplied, TurnstileError
from turnstile.core.messages import ModelResponse
from turnstile.providers import DecodeError, ProviderError
from turnstile.providers._client import StreamReader, Wire, read_body
from turnstile.providers.replay import CLIENTS

from ._fuzz_inputs import HUGE_EVERY, Mutator, Seed, seeds, strings

LIMIT_MS = 100.0
SMALL = 10_000
"""Inputs under this many bytes must be done within `LIMIT_MS`."""

# -- running ---------------------------------------------------------------------------------------


@dataclass
class Failure:
    way: str
    seed: str
    problem: str
    shown: str


@dataclass
class Report:
    inputs: int = 0
    huge: int = 0
    ways: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    max_ms: float = 0.0
    max_ms_bytes: int = 0
    failures: list[Failure] = field(default_factory=list)

    def lines(self) -> list[str]:
        top = self.kinds.most_common(8)
        rest = sum(self.kinds.values()) - sum(n for _, n in top)
        others = f", {rest:,} of {len(self.kinds) - len(top)} other kinds" if rest else ""
        untyped = sum(n for k, n in self.outcomes.items() if k.startswith("untyped"))
        out = [
            f"inputs: {self.inputs:,} ({', '.join(f'{k} {v:,}' for k, v in self.ways.items())})"
            f", {self.huge:,} of them 10 MB long",
            "outcomes: " + ", ".join(f"{k} {v:,}" for k, v in self.outcomes.most_common()),
            "ProviderError kinds: " + ", ".join(f"{k} {v:,}" for k, v in top) + others,
            f"max time: {self.max_ms:.1f} ms (an input of {self.max_ms_bytes:,} bytes)",
            f"untyped errors: {untyped:,}",
            f"failures: {len(self.failures)}",
        ]
        out += [f"  {f.way} {f.seed}: {f.problem}\n    {f.shown}" for f in self.failures[:50]]
        return [line.encode("utf-8", "backslashreplace").decode() for line in out]


def _size(value: Any) -> int:
    """About the bytes of `value` as JSON, counted without recursion."""
    total = 0
    for _, item in strings(value):
        if isinstance(item, str):
            total += len(item.encode("utf-8", "surrogatepass")) + 3
        elif isinstance(item, dict):
            total += 2 + sum(len(k) + 3 for k in item)
        elif isinstance(item, list):
            total += 2
        else:
            total += len(repr(item)) + 1
    return total


def _shown(value: Any) -> str:
    if isinstance(value, bytes):
        return repr(value[:300])
    return json.dumps(_clipped(value), ensure_ascii=True)[:300]


def _clipped(value: Any, depth: int = 0) -> Any:
    """`value` with what nests deeper than 8 levels shown as "…" (a nest may be 2,000 deep)."""
    if not isinstance(value, dict | list):
        return value if not isinstance(value, float) or math.isfinite(value) else repr(value)
    if depth == 8:
        return "…"
    if isinstance(value, dict):
        return {k: _clipped(v, depth + 1) for k, v in value.items()}
    return [_clipped(v, depth + 1) for v in value]


SPEC = LoopSpec()


def _unsound(response: ModelResponse | None, deltas: list[Any], error: BaseException | None) -> str:
    """Why a run could not keep what an input gave, or "" when it can."""
    try:
        msgspec.json.encode(deltas)
        if isinstance(error, DecodeError):
            msgspec.json.encode([error.path, error.message, str(error)])
            error = ProviderError("malformed_response", str(error), retryable=False)
        if isinstance(error, ProviderError):
            wait = error.retry_after
            if wait is not None and not (math.isfinite(wait) and wait >= 0):
                return f"retry_after {wait!r}"
        loop = Loop(SPEC)
        [ask] = loop.start("go", now=0.0)
        if response is not None:
            loop.send(ModelReplied(ask.id, response, now=1.0))
        elif isinstance(error, ProviderError):
            failed = ModelFailed(ask.id, error.message, error.retryable, error.kind, wait, now=1.0)
            loop.send(failed)
        Loop.load(SPEC, loop.dump())
    except (TurnstileError, TypeError, ValueError, RecursionError, msgspec.MsgspecError) as err:
        return f"a run cannot keep it: {type(err).__name__}: {err}"
    return ""


def _through(way: str, wire: Wire, item: Any, rng: random.Random) -> tuple[Any, list[Any]]:
    deltas: list[Any] = []
    if way == "decode":
        return wire.decode(item), deltas
    if way == "stream":
        accumulator = wire.accumulator()
        for event in item:
            deltas += accumulator.feed(event)
        return accumulator.result(), deltas
    if way == "bytes-body":
        return read_body(wire, item), deltas
    reader = StreamReader(wire, deltas.append)
    start = 0
    while start < len(item):
        end = start + rng.choice([1, 3, 7, 64, 1024, 1 << 20])
        reader.feed(item[start:end])
        start = end
    return reader.result(), deltas


def _input(mutator: Mutator, seed: Seed, pool: list[Seed]) -> tuple[str, Any]:
    rng = mutator.rng
    rounds = rng.choice([1, 1, 2, 3])
    if rng.random() < 0.25:
        if seed.sse is not None:
            data = seed.sse.encode()
            way = "bytes-stream"
        else:
            data = json.dumps(seed.body, ensure_ascii=rng.random() < 0.5).encode()
            way = "bytes-body"
        for _ in range(rounds):
            data = mutator.raw(data)
        return way, data
    if seed.events is not None:
        others = [e for s in pool if s.provider == seed.provider for e in (s.events or [])]
        events = seed.events
        for _ in range(rounds):
            events = mutator.events(events, others)
        return "stream", events
    body = seed.body
    for _ in range(rounds):
        body = mutator.tree(body)
    return "decode", body


def run(inputs: int, seed: int = 1) -> Report:
    """Send `inputs` mutated replies through the codecs; the report counts what happened."""
    rng = random.Random(seed)
    pool = seeds()
    mutator = Mutator(rng, pool)
    report = Report()
    for _ in range(inputs):
        origin = rng.choice(pool)
        way, item = _input(mutator, origin, pool)
        if rng.randrange(HUGE_EVERY) == 0:
            item = mutator.huge(item)
            report.huge += 1
        size = len(item) if isinstance(item, bytes) else _size(item)
        wire = CLIENTS[origin.provider].wire
        chunking = random.Random(rng.random())
        report.inputs += 1
        report.ways[way] += 1
        elapsed, outcome, problem = _attempt(way, wire, item, chunking)
        if elapsed > LIMIT_MS and size < SMALL:  # measured again: a pause is not the input's
            elapsed = min(elapsed, _attempt(way, wire, item, random.Random(0))[0])
            if elapsed > LIMIT_MS:
                problem = problem or f"took {elapsed:.0f} ms for {size:,} bytes"
        if elapsed > report.max_ms:
            report.max_ms, report.max_ms_bytes = elapsed, size
        head, _, kind = outcome.partition(": ")
        report.outcomes[head] += 1
        if head.startswith("ProviderError"):
            report.kinds[kind] += 1
        if problem:
            report.failures.append(Failure(way, origin.name, problem, _shown(item)))
    return report


def _attempt(way: str, wire: Wire, item: Any, rng: random.Random) -> tuple[float, str, str]:
    """(ms, outcome, problem) of one input; problem is "" when it passed."""
    response, deltas, error = None, [], None
    start = time.perf_counter()
    try:
        response, deltas = _through(way, wire, item, rng)
        outcome = "reply"
    except DecodeError as err:
        error, outcome = err, "DecodeError"
    except ProviderError as err:
        error, outcome = (
            err,
            f"ProviderError ({'retryable' if err.retryable else 'final'}): {err.kind}",
        )
    except Exception as err:  # what this script is here to find
        elapsed = (time.perf_counter() - start) * 1000
        return elapsed, f"untyped: {type(err).__name__}", f"{type(err).__name__}: {err}"[:300]
    elapsed = (time.perf_counter() - start) * 1000
    return elapsed, outcome, _unsound(response, deltas, error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--inputs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = run(args.inputs, args.seed)
    print(f"bench.fuzz · seed {args.seed} · {time.perf_counter() - start:.0f} s")
    print("\n".join(report.lines()))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
