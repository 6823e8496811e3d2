"""What watching a run costs: µs per turn of the journal bench's sync run (two tool calls a
turn) with `logging` at INFO and with OpenTelemetry spans (the SDK's, dropped; the API's no-op
ones), against
the same run with neither, measured in the same run."""

from __future__ import annotations

__all__ = ["rows"]

import logging
import time
from collections.abc import Callable
from typing import Any

from turnstile.executors import ScriptedModel, sync

from ._measure import repeat
from .journal import SPEC, _replies, lookup

Row = tuple[str, str, str, str, str]


def _run_us(turns: int, on_event: Callable[[Any], None] | None) -> float:
    model = ScriptedModel(_replies(turns))
    start = time.perf_counter()
    sync.run(SPEC, "go", model=model, tools=[lookup], on_event=on_event)
    return (time.perf_counter() - start) / (turns + 1) * 1e6


def _traced_us(turns: int, sdk: bool = True) -> float:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from turnstile.executors.otel import Tracing

    provider = TracerProvider() if sdk else trace.NoOpTracerProvider()
    tracing = Tracing("bench", model="m", provider="p", tracer_provider=provider)
    with tracing.run() as on_event:
        return _run_us(turns, on_event)


def _logged_us(turns: int) -> float:
    logger = logging.getLogger("turnstile")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        return _run_us(turns, None)
    finally:
        logger.setLevel(level)


def rows(sizes: list[int], times: int) -> list[Row]:
    turns = min(max(sizes), 100)
    bare = repeat(lambda: _run_us(turns, None), times, warm_up=True)
    out: list[Row] = [
        ("sync turn µs, unwatched (2 tool calls)", str(turns), str(bare), "baseline", "")
    ]
    for name, fn in (
        ("logging at INFO", _logged_us),
        ("OpenTelemetry spans, SDK", _traced_us),
        ("OpenTelemetry spans, no-op", lambda turns: _traced_us(turns, sdk=False)),
    ):
        figure = repeat(lambda fn=fn: fn(turns), times, warm_up=True)
        ratio = f"unwatched {bare.median:.1f} → ×{figure.median / bare.median:.2f}"
        out.append((f"sync turn µs, {name}", str(turns), str(figure), ratio, ""))
    return out
