"""Agents for `turnstile run` in the tests: scripted, so they run offline, and stateless (each
reply follows from the request), so one agent serves any number of runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec
from turnstile.core import LoopSpec, ModelRequest, Price, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults, Usage
from turnstile.executors import Agent, ScriptedModel, as_tool


@tool
def get_weather(city: str) -> dict[str, object]:
    """The weather in a city."""
    return {"city": city, "temp_c": 21, "sky": "sunny"}


@tool
def wait_for_release(city: str) -> str:
    """Says it started (a file `started`), then waits for a file `release`, both in the folder
    $TURNSTILE_TEST_DIR: a run to interrupt."""
    folder = Path(os.environ["TURNSTILE_TEST_DIR"])
    (folder / "started").touch()
    while not (folder / "release").exists():
        time.sleep(0.02)
    return "sunny"


def answer(request: ModelRequest) -> ModelResponse:
    """Asks for the weather, then answers from its result."""
    if type(request.messages[-1]) is ToolResults:
        text = "It is sunny in Paris,\nand 21 °C."
        return ModelResponse([Text(text)], ModelStop.end_turn, Usage(180, 12))
    tool_name = request.tools[0].name
    call = ToolCall("c1", tool_name, {"city": "Paris"})
    return ModelResponse([Text("Let me check."), call], ModelStop.tool_use, Usage(120, 18))


PRICED = LoopSpec(
    system="You answer weather questions.",
    models=("scripted-1",),
    prices={"scripted-1": Price(input=3.0, output=15.0)},
)

agent = Agent(PRICED, model=ScriptedModel(answer), tools=[get_weather])
approved = Agent(
    PRICED, model=ScriptedModel(answer), tools=[tool(needs_approval=True)(get_weather.fn)]
)
interruptible = Agent(PRICED, model=ScriptedModel(answer), tools=[wait_for_release])


class City(msgspec.Struct):
    city: str


forecaster = as_tool(
    LoopSpec(system="You forecast."),
    name="forecast",
    description="Forecast a city's weather.",
    tools=[tool(needs_approval=True)(get_weather.fn)],
    input=City,
)
delegating = Agent(PRICED, model=ScriptedModel(answer), tools=[forecaster])
"""A run whose sub-agent's call needs approval."""


class Forecast(msgspec.Struct):
    city: str
    sky: str


def typed_answer(request: ModelRequest) -> ModelResponse:
    call = ToolCall("f1", "final_answer", {"city": "Paris", "sky": "sunny"})
    return ModelResponse([call], ModelStop.tool_use, Usage(50, 10))


typed = Agent(LoopSpec(output=Forecast), model=ScriptedModel(typed_answer))
not_an_agent = PRICED
keyless = Agent(model="openai:gpt-4.1")  # OPENAI_API_KEY unset
