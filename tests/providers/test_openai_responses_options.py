"""The OpenAI Responses codec writes what a request asks beyond the conversation: prompt caching,
tool strictness and choice, hosted tools, and a native answer format."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import ToolParam
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import UserMessage
from turnstile.core.request import CachePolicy, OutputFormat, ServerTool, UseTool
from turnstile.providers.openai_responses import encode

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
        "tags": {"type": "array", "items": {"type": ["object", "null"], "properties": {}}},
    },
    "required": ["city", "where", "tags"],
    "$defs": {"Open": {"type": "object", "additionalProperties": True}},
    "examples": [{"type": "object"}],
}
CLOSED = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "where": {
            "type": "object",
            "properties": {"lat": {"type": "number"}},
            "additionalProperties": False,
        },
        "tags": {
            "type": "array",
            "items": {"type": ["object", "null"], "properties": {}, "additionalProperties": False},
        },
    },
    "required": ["city", "where", "tags"],
    "$defs": {"Open": {"type": "object", "additionalProperties": True}},
    "examples": [{"type": "object"}],
    "additionalProperties": False,
}
FORMAT = "openai_responses"
SEARCH = {"type": "tool_search"}
MCP = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"}
BODY = TypeAdapter(ResponseCreateParamsNonStreaming)
TOOL = TypeAdapter(ToolParam)


def sent(**fields: Any) -> dict[str, Any]:
    request = ModelRequest(None, [UserMessage("q")], fields.pop("tools", ()), 64, **fields)
    body = encode(request, model="gpt-5.1")
    BODY.validate_python(body)
    return body


def test_caching_on_sends_the_policy_key_or_else_the_conversation_s() -> None:
    on = CachePolicy()
    assert sent(cache=on, cache_key="turnstile-abc")["prompt_cache_key"] == "turnstile-abc"
    keyed = CachePolicy(key="team-1")
    assert sent(cache=keyed, cache_key="turnstile-abc")["prompt_cache_key"] == "team-1"
    assert "prompt_cache_key" not in sent(cache=on)


@pytest.mark.parametrize("cache", [None, CachePolicy(enabled=False, key="team-1")])
def test_caching_off_sends_no_key(cache: CachePolicy | None) -> None:
    assert "prompt_cache_key" not in sent(cache=cache, cache_key="turnstile-abc")


@pytest.mark.parametrize(("strict", "wire"), [(None, False), (False, False), (True, True)])
def test_strict_is_the_tool_s_own_and_none_is_not_strict(strict: Any, wire: bool) -> None:
    (tool,) = sent(tools=(ToolSpec("get_chart", parameters=SCHEMA, strict=strict),))["tools"]
    assert tool["strict"] is wire
    assert tool["parameters"] == (CLOSED if strict else SCHEMA)
    TOOL.validate_python(tool)


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("required", "required"),
        ("none", "none"),
        (UseTool("get_chart"), {"type": "function", "name": "get_chart"}),
    ],
)
def test_tool_choice_is_written_unless_auto(choice: Any, wire: Any) -> None:
    tools = (ToolSpec("get_chart"),)
    assert sent(tools=tools, tool_choice=choice)["tool_choice"] == wire
    assert "tool_choice" not in sent(tools=tools)


def test_a_client_option_still_overrides_the_request_s_choice() -> None:
    request = ModelRequest(None, [UserMessage("q")], (ToolSpec("a"),), 64, tool_choice="required")
    assert encode(request, model="m", tool_choice="auto")["tool_choice"] == "auto"


def test_server_tools_of_this_format_join_the_tools_as_written() -> None:
    search = {"type": "web_search", "search_context_size": "low"}
    mcp = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.deepwiki.com/mcp"}
    server = (
        ServerTool("openai_responses", search),
        ServerTool("anthropic_messages", {"type": "web_search_20250305", "name": "web_search"}),
        ServerTool("openai_responses", mcp),
    )
    body = sent(tools=(ToolSpec("get_chart"),), server_tools=server)
    assert [t.get("name", t["type"]) for t in body["tools"]] == ["get_chart", "web_search", "mcp"]
    assert body["tools"][1:] == [search, mcp]
    assert body["tools"][1] is not search
    only = sent(server_tools=server[:1])
    assert only["tools"] == [search]


def test_a_native_answer_format_is_text_format_json_schema() -> None:
    body = sent(output=OutputFormat("Weather", SCHEMA))
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "Weather", "schema": CLOSED, "strict": True}
    }
    loose = sent(output=OutputFormat("Weather", SCHEMA, strict=False))
    assert loose["text"]["format"]["schema"] == SCHEMA
    assert loose["text"]["format"]["strict"] is False


def test_a_deferred_tool_says_so_and_another_does_not() -> None:
    tools = (ToolSpec("get_chart", defer_loading=True), ToolSpec("get_weather"))
    deferred, loaded = sent(tools=tools, server_tools=(ServerTool(FORMAT, SEARCH),))["tools"][:2]
    assert deferred["defer_loading"] is True
    assert "defer_loading" not in loaded
    TOOL.validate_python(deferred)


def test_a_server_tool_with_a_position_stands_there_among_the_tools() -> None:
    """A request recorded with its hosted tools first (the tool search, then the functions it
    finds) is written with them first again; a server tool without a position goes last."""
    web = {"type": "web_search"}
    server = (
        ServerTool(FORMAT, SEARCH, position=0),
        ServerTool(FORMAT, web),
        ServerTool(FORMAT, MCP, position=2),
    )
    tools = (ToolSpec("a"), ToolSpec("b"))
    names = [t.get("name", t["type"]) for t in sent(tools=tools, server_tools=server)["tools"]]
    assert names == ["tool_search", "a", "mcp", "b", "web_search"]
    far = sent(tools=tools, server_tools=(ServerTool(FORMAT, SEARCH, position=9),))["tools"]
    assert [t.get("name", t["type"]) for t in far] == ["a", "b", "tool_search"]


def test_allowed_tools_go_as_the_tool_choice_option_verbatim() -> None:
    """The API's `allowed_tools` choice (a subset the model may, or must, call from, the tools
    staying the same for the cache) is a client option, sent as given."""
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "a"}],
    }
    request = ModelRequest(None, [UserMessage("q")], (ToolSpec("a"), ToolSpec("b")), 64)
    body = encode(request, model="gpt-5.1", tool_choice=allowed)
    assert body["tool_choice"] == allowed
    BODY.validate_python(body)
