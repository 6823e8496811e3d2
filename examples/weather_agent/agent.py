"""The agent: a `get_weather` tool, the loop's spec, and `run`, which drives the loop with any
model client (a provider's `Client` in production, `turnstile_client` in the tests)."""

from __future__ import annotations

__all__ = ["SPEC", "get_weather", "run"]

from typing import Annotated

import msgspec
from turnstile.core import LoopSpec, tool
from turnstile.executors import ModelClient, Run, sync

WEATHER = {
    "北京": {"温度": 26, "天气": "多云", "湿度": 45},
    "上海": {"温度": 29, "天气": "晴", "湿度": 68},
}


@tool
def get_weather(
    city: Annotated[str, msgspec.Meta(description="城市名,例如 北京")],
) -> dict[str, object]:
    """查询城市的实时天气"""
    if city not in WEATHER:
        raise LookupError(f"没有 {city} 的天气数据; 可查询: {', '.join(WEATHER)}")
    return WEATHER[city]


SPEC = LoopSpec(system="你是一个天气助手。", tools=(get_weather.spec,), max_tokens=1024)


def run(prompt: str, *, model: ModelClient) -> Run:
    """Answer `prompt`, calling `get_weather` as often as the model asks."""
    return sync.run(SPEC, prompt, model=model, tools=[get_weather])
