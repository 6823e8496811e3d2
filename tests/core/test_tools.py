"""`@tool`: schema from the signature, arguments checked by msgspec, bad ones model-readable."""

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


def test_valid_arguments_are_converted_to_the_functions_types() -> None:
    assert locate.check({"city": "北京", "near": {"x": 1, "y": 2}}) == {
        "city": "北京",
        "units": "metric",
        "near": Point(1, 2),
    }


def test_invalid_arguments_become_a_short_error_the_model_can_act_on() -> None:
    assert locate.check({}) == ToolOutcome(
        "invalid arguments for locate: Object missing required field `city`", True
    )
    out = locate.check({"city": 3})
    assert isinstance(out, ToolOutcome) and "Expected `str`, got `int` - at `$.city`" in out.content
    out = locate.check({"city": "a", "units": "furlongs"})
    assert isinstance(out, ToolOutcome) and out.is_error and "$.units" in out.content
    out = locate.check({"city": "a", "colour": "red"})
    assert isinstance(out, ToolOutcome) and out.is_error and "colour" in out.content


def test_the_function_stays_callable() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    assert echo("hi") == "hi"
    assert echo.check({"text": "hi"}) == {"text": "hi"}
    assert not echo.is_async


def test_async_functions_are_known_as_such() -> None:
    @tool
    async def slow(n: int) -> int:
        """Async tool."""
        return n * 2

    assert slow.is_async and slow.check({"n": 2}) == {"n": 2}
