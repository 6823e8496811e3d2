"""A person's arguments are checked against a tool's JSON schema before a call runs with them
(`ToolSpec.arguments_problem`): what fits the schema msgspec writes for a typed function is
what msgspec converts to its types, and a hand-written schema's keywords hold."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pytest
from turnstile.core import ToolSpec, tool


class Point(msgspec.Struct):
    x: int
    y: int = 0


@tool
def place(
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=8, pattern="^[a-z]+$")],
    at: Point,
    tags: list[Literal["red", "blue"]] = [],  # noqa: B006
    size: Annotated[float, msgspec.Meta(ge=0, lt=10)] = 1.0,
    note: str | None = None,
    pair: tuple[int, str] | None = None,
) -> str:
    """Places a thing."""
    return name


@pytest.mark.parametrize(
    "arguments",
    [
        {"name": "box", "at": {"x": 1}},
        {"name": "box", "at": {"x": 1, "y": 2}, "tags": ["red", "blue"], "size": 9.5},
        {"name": "box", "at": {"x": 1}, "note": None, "pair": [1, "a"], "size": 0},
        {"name": "b", "at": {"x": -4}, "note": "hi"},
        {"name": 3, "at": {"x": 1}},
        {"name": "", "at": {"x": 1}},
        {"name": "toolongname", "at": {"x": 1}},
        {"name": "Box", "at": {"x": 1}},
        {"at": {"x": 1}},
        {"name": "box"},
        {"name": "box", "at": {"x": "1"}},
        {"name": "box", "at": {"x": 1.5}},
        {"name": "box", "at": {"x": True}},
        {"name": "box", "at": {"x": 1}, "tags": ["green"]},
        {"name": "box", "at": {"x": 1}, "size": 10},
        {"name": "box", "at": {"x": 1}, "size": -0.1},
        {"name": "box", "at": {"x": 1}, "pair": [1, 2]},
        {"name": "box", "at": {"x": 1}, "pair": [1, "a", 2]},
        {"name": "box", "at": {"x": 1}, "colour": "red"},
        {"name": "box", "at": {"x": 1, "z": 2}},
        {"name": "box", "at": {"x": 1}, "note": 5},
    ],
)
def test_arguments_fit_a_typed_tools_schema_exactly_when_msgspec_takes_them(
    arguments: dict[str, Any],
) -> None:
    takes = not isinstance(place.check(arguments), tuple)  # an error outcome is a tuple
    assert (place.spec.arguments_problem(arguments) is None) == takes


def test_the_problem_names_where_and_what() -> None:
    problem = place.spec.arguments_problem({"name": "box", "at": {"x": "1"}})
    assert problem == "at.x: expected integer, got string"
    assert place.spec.arguments_problem({"at": {"x": 1}}) == "name: a required field is missing"
    assert ToolSpec("t").arguments_problem([]) == "arguments: expected object, got array"


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "integer", "minimum": 10}]},
        "ids": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 1},
        "kind": {"not": {"const": "root"}},
        "mode": {"enum": ["a", "b"]},
    },
    "patternProperties": {"^x-": {"type": "string"}},
    "dependentRequired": {"mode": ["kind"]},
    "if": {"required": ["kind"]},
    "then": {"required": ["ids"]},
    "maxProperties": 4,
}


@pytest.mark.parametrize(
    ("arguments", "fits"),
    [
        ({"n": 3}, True),
        ({"n": 11}, True),
        ({"n": 12}, False),  # both of oneOf
        ({"n": 4}, False),  # neither
        ({"ids": ["a", "a"]}, False),
        ({"ids": []}, False),
        ({"kind": "root", "ids": ["a"]}, False),
        ({"kind": "leaf"}, False),  # if kind, then ids
        ({"kind": "leaf", "ids": ["a"], "mode": "a"}, True),
        ({"mode": "a"}, False),  # mode needs kind
        ({"mode": "c", "kind": "k", "ids": ["a"]}, False),
        ({"x-trace": "t"}, True),
        ({"x-trace": 1}, False),
        ({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, False),
    ],
)
def test_a_hand_written_schemas_keywords_hold(arguments: dict[str, Any], fits: bool) -> None:
    assert (ToolSpec("t", parameters=SCHEMA).arguments_problem(arguments) is None) == fits


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
        {"type": "object", "properties": {"a": False}},
    ],
)
def test_a_schema_that_cannot_be_read_or_allows_nothing_fits_nothing(
    parameters: dict[str, Any],
) -> None:
    assert ToolSpec("t", parameters=parameters).arguments_problem({"a": "x"}) is not None
