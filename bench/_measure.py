"""Timing helpers: medians with spread over repeated runs, and a least-squares growth term."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Figure:
    median: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:,.2f} ({self.low:,.2f}–{self.high:,.2f})"

    @classmethod
    def of(cls, values: list[float]) -> Figure:
        """The median of `values`, with their spread."""
        return cls(statistics.median(values), min(values), max(values))


def repeat(fn: Callable[[], float], times: int, *, warm_up: bool = False) -> Figure:
    """Run `fn` (which returns one measurement) `times` times: median, and min–max as spread.

    `warm_up` runs it once untimed first. Collecting garbage before each run keeps one run's
    leftovers out of the next; the warm-up keeps the first timed run from paying for memory the
    collection handed back.
    """
    values = []
    for _ in range(times):
        gc.collect()
        if warm_up:
            fn()
        values.append(fn())
    return Figure.of(values)


def per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - start) / n / 1000


def slope(costs: list[float]) -> tuple[float, float]:
    """Fit cost(i) = a + b·i by least squares; returns (a, b)."""
    n = len(costs)
    mean_x = (n - 1) / 2
    mean_y = sum(costs) / n
    sxx = sum((i - mean_x) ** 2 for i in range(n))
    sxy = sum((i - mean_x) * (c - mean_y) for i, c in enumerate(costs))
    b = sxy / sxx if sxx else 0.0
    return mean_y - b * mean_x, b
