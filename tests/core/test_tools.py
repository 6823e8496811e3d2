"""`@tool`: schema from the signature, arguments checked by msgspec, failures model-readable."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from turnstile.core import ToolOutcome, tool


class Point(msgspec.Struct):
    x: int
    y: int


@tool(resource="map")
def locate(
    city: Annotated[str, msgspec.Meta(description="城市名")],
    units: Literal["metric", "imperial"] = "metric",
    near: Point | None = None,
) -> dict[str, object]:
    """Find a city on the map.

    Longer text that is not part of the description.
    """
    if city == "nowhere":
        raise KeyError("city")
    return {"city": city, "units": units, "near": near}


def test_the_schema_comes_from_the_signature() -> None:
    spec = locate.spec
    assert spec.name == "locate" and spec.resource == "map"
    assert spec.description == "Find a city on the map."
    params = spec.parameters
    assert params["type"] == "object" and params["required"] == ["city"]
    assert params["properties"]["city"] == {"type": "string", "description": "城市名"}
    assert params["properties"]["units"]["enum"] == ["imperial", "metric"]
    assert "Point" in params["$defs"]


def test_valid_arguments_are_converted_and_the_result_rendered_as_json() -> None:
    out = locate.invoke({"city": "北京", "near": {"x": 1, "y": 2}})
    assert out == ToolOutcome('{"city":"北京","units":"metric","near":{"x":1,"y":2}}')


def test_invalid_arguments_become_a_short_error_the_model_can_act_on() -> None:
    assert locate.invoke({}) == ToolOutcome(
        "invalid arguments for locate: Object missing required field `city`", True
    )
    out = locate.invoke({"city": 3})
    assert out.is_error and "Expected `str`, got `int` - at `$.city`" in out.content
    out = locate.invoke({"city": "a", "units": "furlongs"})
    assert out.is_error and "$.units" in out.content
    out = locate.invoke({"city": "a", "colour": "red"})
    assert out.is_error and "colour" in out.content


def test_an_exception_becomes_an_error_result_without_a_traceback() -> None:
    out = locate.invoke({"city": "nowhere"})
    assert out == ToolOutcome("locate failed: KeyError: 'city'", True)
    assert "Traceback" not in out.content


def test_strings_pass_through_and_the_function_stays_callable() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    assert echo("hi") == "hi"
    assert echo.invoke({"text": "hi"}) == ToolOutcome("hi")


async def _async_tool_body() -> None:
    @tool
    async def slow(n: int) -> int:
        """Async tool."""
        return n * 2

    assert slow.is_async
    assert await slow.ainvoke({"n": 2}) == ToolOutcome("4")
    assert (await slow.ainvoke({"n": "x"})).is_error


def test_async_tools_are_awaited() -> None:
    import trio

    trio.run(_async_tool_body)
