"""`turnstile demo`: which city is warmer, answered offline by a scripted model and a tool."""

from __future__ import annotations

__all__ = ["WEATHER", "demo_model", "demo_spec", "get_weather", "run_demo"]

from typing import Annotated

import msgspec
from turnstile.core import LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Run, ScriptedModel, sync

PROMPT = "北京和上海哪个更暖和?"

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


def demo_spec() -> LoopSpec:
    return LoopSpec(system="你是一个天气助手。", tools=(get_weather.spec,), max_tokens=1024)


def demo_model() -> ScriptedModel:
    """Two scripted replies: both cities' weather asked for at once, then the answer."""
    return ScriptedModel(
        [
            ModelResponse(
                [
                    Text("我来帮您查询北京和上海的实时天气。"),
                    ToolCall("call_00_1Dy", "get_weather", {"city": "北京"}),
                    ToolCall("call_00_7Kx", "get_weather", {"city": "上海"}),
                ],
                ModelStop.tool_use,
                Usage(512, 121),
            ),
            ModelResponse(
                [
                    Text(
                        "根据实时天气数据:上海更暖和,目前气温 29°C,晴;"
                        "北京 26°C,多云。上海比北京高出 3°C。"
                    )
                ],
                ModelStop.end_turn,
                Usage(293, 130),
            ),
        ]
    )


def run_demo() -> Run:
    return sync.run(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather])
