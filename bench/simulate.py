"""What simulation costs: 1,000 seeds of the README's agent (two tools, a typed answer; its
model the README's recorded trace, served through the real OpenAI SDK client once per turn)
under every kind of fault with every invariant checked after every step, against the same
seeds with neither faults nor checks, measured in the same run."""

from __future__ import annotations

__all__ = ["readme_agent", "rows"]

import time
from pathlib import Path

import msgspec
from turnstile.core import LoopSpec, tool
from turnstile.executors import Agent
from turnstile.executors.testing import Faults, simulate

from ._measure import repeat

Row = tuple[str, str, str, str, str]
TRACE = Path(__file__).parent.parent / "docs" / "traces" / "weather.openai-chat.json"
PROMPT = "Is it warmer in Paris or in Rome? What time is it there?"


@tool
def get_weather(city: str) -> dict:  # type: ignore[type-arg]
    """The weather now in a city: temperature in °C and sky."""
    return {"Paris": {"temp_c": 18, "sky": "cloudy"}, "Rome": {"temp_c": 24, "sky": "sunny"}}[city]


@tool(description="The local time in a city, as HH:MM.")
def local_time(city: str) -> str:
    return {"Paris": "14:05", "Rome": "14:05"}[city]


class Answer(msgspec.Struct):
    city: str
    temp_c: float


def readme_agent() -> Agent:
    """The README's agent, its model the README's trace replayed through the OpenAI SDK."""
    import httpx2
    from turnstile.providers import openai_chat
    from turnstile.providers.replay import ReplayTransport, load_trace, offline_sdk

    http = httpx2.Client(transport=ReplayTransport(load_trace(TRACE)), trust_env=False)
    client = openai_chat.Client(offline_sdk("openai-chat", http), model="gpt-4.1", stream=True)
    return Agent(LoopSpec(output=Answer), model=client, tools=[get_weather, local_time])


def _per_seed_ms(agent: Agent, seeds: int, **options: object) -> float:
    start = time.perf_counter()
    report = simulate(agent, PROMPT, seeds=seeds, keep_going=True, **options)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    assert report.ok and any(r.stop_reason == "finish_tool" for r in report.runs), str(report)
    return elapsed / seeds * 1000


def rows(sizes: list[int], times: int) -> list[Row]:
    seeds = 1000 if max(sizes) >= 1000 else 50
    agent = readme_agent()
    _per_seed_ms(agent, 1, faults=Faults.none())  # the trace's replies, learned once
    bare = repeat(lambda: _per_seed_ms(agent, seeds, faults=Faults.none(), checks=False), times)
    faulted = repeat(lambda: _per_seed_ms(agent, seeds, checks=False), times)
    full = repeat(lambda: _per_seed_ms(agent, seeds), times)
    total = full.median  # ms per seed is s per 1,000 seeds
    name = "simulate ms/seed, README agent"
    return [
        (f"{name}, no faults, no checks", str(seeds), str(bare), "baseline", ""),
        (
            f"{name}, all faults, no checks",
            str(seeds),
            str(faulted),
            f"bare {bare.median:.2f} → ×{faulted.median / bare.median:.1f}",
            "",
        ),
        (
            f"{name}, all faults, all checks",
            str(seeds),
            str(full),
            f"bare {bare.median:.2f} → ×{full.median / bare.median:.1f}",
            f"1,000 seeds ≤ 60 s: {total:.1f} s, " + ("pass" if total <= 60 else "miss"),
        ),
    ]
