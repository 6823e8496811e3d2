"""What a request asks of the Anthropic API beyond the conversation: strict tools, the loop's
tool choice (beside the client-wide options), and the answer's shape (native structured output)."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import TypeAdapter
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import UserMessage
from turnstile.core.request import OutputFormat, ToolChoice, UseTool
from turnstile.providers.anthropic_messages import encode

CHART = ToolSpec(
    "get_chart",
    "A temperature chart of a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PARAMS = TypeAdapter(MessageCreateParamsNonStreaming)


def body(**fields: Any) -> dict[str, Any]:
    fields.setdefault("tools", (CHART,))
    options = fields.pop("options", {})
    request = ModelRequest(None, [UserMessage("Which city is warmer?")], max_tokens=256, **fields)
    out = encode(request, model="claude-sonnet-4-6", **options)
    PARAMS.validate_python(out)
    return out


def test_a_tool_says_whether_it_is_strict() -> None:
    strict = ToolSpec("get_chart", parameters=CHART.parameters, strict=True)
    loose = ToolSpec("note", strict=False)
    tools = body(tools=(strict, loose, ToolSpec("now")))["tools"]
    assert [t.get("strict") for t in tools] == [True, False, None]
    assert "strict" not in tools[2]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", None),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        (UseTool("get_chart"), {"type": "tool", "name": "get_chart"}),
    ],
)
def test_the_loops_tool_choice(choice: ToolChoice, wire: dict[str, Any] | None) -> None:
    assert body(tool_choice=choice).get("tool_choice") == wire


def test_a_client_wide_tool_choice_stands_unless_the_loop_decides() -> None:
    serial = {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    assert body(options=serial)["tool_choice"] == serial["tool_choice"]
    assert body(tool_choice="required", options=serial)["tool_choice"] == {
        "type": "any",
        "disable_parallel_tool_use": True,
    }
    assert body(tool_choice=UseTool("get_chart"), options=serial)["tool_choice"] == {
        "type": "tool",
        "name": "get_chart",
        "disable_parallel_tool_use": True,
    }
    assert body(tool_choice="none", options=serial)["tool_choice"] == {"type": "none"}


def test_no_tools_no_tool_choice() -> None:
    assert "tool_choice" not in body(tools=(), tool_choice="required")


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
    "additionalProperties": False,
}


def test_native_structured_output_is_output_config_format() -> None:
    out = body(output=OutputFormat("Weather", SCHEMA))
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    effort = body(
        output=OutputFormat("Weather", SCHEMA), options={"output_config": {"effort": "low"}}
    )
    assert effort["output_config"] == {
        "effort": "low",
        "format": {"type": "json_schema", "schema": SCHEMA},
    }
