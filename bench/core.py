"""The core's own cost per turn, next to a hand-written loop doing the same work."""

from __future__ import annotations

import io
import statistics
import time
import tracemalloc

from turnstile.core import Guards, Loop, LoopSpec, ModelReplied, ToolReturned, ToolSpec
from turnstile.core._state import ENCODER
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage

from ._measure import Figure, repeat, slope

# every guard on at its default, but turns and time, which a 1000-turn run must not hit
SPEC = LoopSpec(tools=(ToolSpec("lookup"),), guards=Guards(max_turns=None, deadline_s=None))


def _replies(n: int) -> list[ModelResponse]:
    return [
        ModelResponse(
            [Text("checking"), ToolCall(f"call_{i}", "lookup", {"i": i})],
            ModelStop.tool_use,
            Usage(100 + i, 20),
        )
        for i in range(n)
    ]


def turns_loop(n: int, per_turn: list[int] | None = None) -> Loop:
    """Drive `n` turns of one tool call each through `Loop`; optionally time each turn."""
    replies = _replies(n)
    loop = Loop(SPEC)
    [ask] = loop.start("go", 0.0)
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        [run] = loop.send(ModelReplied(ask.id, replies[i], now=float(i)))
        [ask] = loop.send(ToolReturned(run.id, "ok", now=float(i)))
        if per_turn is not None:
            per_turn.append(clock() - t0)
    return loop


def turns_handwritten(n: int, per_turn: list[int] | None = None) -> list[dict[str, object]]:
    """The same work as a plain dict-append loop: record the reply, pair results, go on."""
    replies = [
        {
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": f"call_{i}", "name": "lookup", "input": {"i": i}},
            ],
            "stop_reason": "tool_use",
        }
        for i in range(n)
    ]
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        reply = replies[i]
        messages.append({"role": "assistant", "content": reply["content"]})
        calls = [b for b in reply["content"] if b["type"] == "tool_use"]
        if not calls:
            break
        results = [{"type": "tool_result", "tool_use_id": c["id"], "content": "ok"} for c in calls]
        messages.append({"role": "user", "content": results})
        if per_turn is not None:
            per_turn.append(clock() - t0)
    return messages


def per_turn_us(drive, n: int) -> float:
    """Mean µs of one turn: the turns alone, not building the scripted replies or the loop."""
    costs: list[int] = []
    drive(n, costs)
    return sum(costs) / n / 1000


def growth(drive, n: int, runs: int) -> tuple[float, float]:
    """(cost of the last tenth of turns / the first tenth, fitted ns per turn of history), on
    each turn's median cost over `runs` runs: a burst of load on a shared machine lands on some
    turns of one run, and would read as growth (or shrinkage) in a single run."""
    by_turn: list[list[int]] = [[] for _ in range(n)]
    for _ in range(runs):
        costs: list[int] = []
        drive(n, costs)
        for i, cost in enumerate(costs):
            by_turn[i].append(cost)
    typical = [statistics.median(c) for c in by_turn]
    tenth = max(1, n // 10)
    ratio = statistics.median(typical[-tenth:]) / statistics.median(typical[:tenth])
    return ratio, slope(typical)[1]


def checkpoint_us(n: int, whole: bool) -> float:
    """Per turn: append the turn's new events to a log, or dump the whole state."""
    replies = _replies(n)
    loop = Loop(SPEC)
    [ask] = loop.start("go", 0.0)
    log = io.BytesIO()
    written = 0
    elapsed = 0
    clock = time.perf_counter_ns
    for i in range(n):
        [run] = loop.send(ModelReplied(ask.id, replies[i], now=float(i)))
        [ask] = loop.send(ToolReturned(run.id, "ok", now=float(i)))
        t0 = clock()
        if whole:
            loop.dump()
        else:
            events = loop.state.events
            log.write(ENCODER.encode_lines(events[written:]))  # the turn's events, one per line
            written = len(events)
        elapsed += clock() - t0
    return elapsed / n / 1000


def memory_per_turn(n: int) -> tuple[float, float]:
    """(peak, retained) bytes per turn while a loop of `n` turns is alive."""
    replies = _replies(n)  # the model's replies exist either way; count the loop's own cost
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    loop = Loop(SPEC)
    [ask] = loop.start("go", 0.0)
    for i in range(n):
        [run] = loop.send(ModelReplied(ask.id, replies[i], now=float(i)))
        [ask] = loop.send(ToolReturned(run.id, "ok", now=float(i)))
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del loop
    return (peak - base) / n, (current - base) / n


def _runs(n: int, times: int) -> int:
    """Runs of `n` turns to take the median of: a 10-turn run lasts ~0.1 ms, so one scheduler
    hiccup moves it by half; short runs are repeated until every size has seen ~3000 turns."""
    return times if times == 1 else max(times, 3000 // n)


FLAT_SIZES = (10, 100, 1_000, 10_000)


def cpu_per_turn_us(n: int) -> float:
    """CPU µs a turn over a run of `n` turns (the replies built first): on a shared machine,
    time spent descheduled does not count."""
    replies = _replies(n)
    loop = Loop(SPEC)
    [ask] = loop.start("go", 0.0)
    start = time.process_time_ns()
    for i in range(n):
        [run] = loop.send(ModelReplied(ask.id, replies[i], now=float(i)))
        [ask] = loop.send(ToolReturned(run.id, "ok", now=float(i)))
    return (time.process_time_ns() - start) / n / 1000


def by_n(times: int) -> tuple[str, str, str, str, str]:
    """The row saying whether a turn costs the same after 100 turns as after 10,000: each
    length's CPU µs a turn, and the longest against 100 (a run's first few turns cost more,
    its caches cold, so a run of 10 is no baseline for growth)."""
    figures = [
        repeat(lambda n=n: cpu_per_turn_us(n), _runs(n, times), warm_up=True) for n in FLAT_SIZES
    ]
    hand = [
        repeat(lambda n=n: per_turn_us(turns_handwritten, n), _runs(n, times), warm_up=True)
        for n in (FLAT_SIZES[1], FLAT_SIZES[-1])
    ]
    ratio = figures[-1].median / figures[1].median
    return (
        "core CPU µs/turn by N",
        f"{FLAT_SIZES[0]}–{FLAT_SIZES[-1]:,}",
        " · ".join(f"{n:,}: {f.median:.2f}" for n, f in zip(FLAT_SIZES, figures, strict=True)),
        f"N={FLAT_SIZES[-1]:,} ×{ratio:.2f} of N={FLAT_SIZES[1]}; hand-written "
        f"×{hand[1].median / hand[0].median:.2f}",
        "pass" if ratio <= 1.2 else "MISS (≤1.2)",
    )


def rows(sizes: list[int], times: int) -> list[tuple[str, str, str, str, str]]:
    """(measure, N, figure, baseline and ratio, target verdict) rows for the table."""
    out = []
    first: Figure | None = None
    for n in sizes:
        runs = _runs(n, times)
        ours = repeat(lambda n=n: per_turn_us(turns_loop, n), runs, warm_up=True)
        hand = repeat(lambda n=n: per_turn_us(turns_handwritten, n), runs, warm_up=True)
        first = first or ours
        verdict = "pass" if ours.median <= 5 else ("within 15 µs" if ours.median <= 15 else "MISS")
        if n != sizes[0]:
            flat = ours.median / first.median
            verdict += f"; ×{flat:.2f} of N={sizes[0]} ({'pass' if flat <= 1.2 else 'MISS'} ≤1.2)"
        out.append(
            (
                "core µs/turn",
                str(n),
                str(ours),
                f"hand-written {hand.median:.2f} → ×{ours.median / hand.median:.1f}",
                verdict,
            )
        )
    n = sizes[-1]
    ratio, b = growth(turns_loop, n, times)
    hand_ratio, hand_b = growth(turns_handwritten, n, times)
    out.append(
        (
            "core growth",
            str(n),
            f"last/first tenth ×{ratio:.2f}, b={b:+.2f} ns/turn",
            f"hand-written ×{hand_ratio:.2f}, b={hand_b:+.2f}",
            "pass" if ratio <= 1.2 else "MISS (≤1.2)",
        )
    )
    if times > 1:  # a run of 10,000 turns: not in --quick
        out.append(by_n(times))
    for n in sizes:
        runs = _runs(n, times)
        log = repeat(lambda n=n: checkpoint_us(n, whole=False), runs, warm_up=True)
        dump = repeat(lambda n=n: checkpoint_us(n, whole=True), runs, warm_up=True)
        out.append(
            (
                "checkpoint µs/turn (log append)",
                str(n),
                str(log),
                f"whole dump {dump.median:.2f} → ×{dump.median / log.median:.1f}",
                "pass" if log.median <= 2 else "MISS (≤2 µs)",
            )
        )
    peak, kept = memory_per_turn(sizes[-1])
    out.append(
        (
            "memory bytes/turn",
            str(sizes[-1]),
            f"retained {kept:,.0f}, peak {peak:,.0f}",
            "",
            "pass" if kept <= 2048 else "MISS (≤2 KiB)",
        )
    )
    return out
