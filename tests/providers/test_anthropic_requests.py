"""Messages API request bodies read back (`decode_request`): each shape real conversations send
decodes to neutral parts, or kept verbatim, and encodes to the body it came from."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from turnstile.core import ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy, ServerTool
from turnstile.providers import DecodeError
from turnstile.providers.anthropic_messages import decode_request, encode

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "anthropic"
FORMAT = "anthropic_messages"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER_Q = {"type": "text", "text": "Weather?"}
WEATHER = {"name": "get_weather", "description": "Current weather", "input_schema": WEATHER_SCHEMA}
DEFERRED = [
    {**WEATHER, "defer_loading": True},
    {
        "name": "search_files",
        "description": "Search the workspace",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "defer_loading": True,
    },
]
# as the SDK's types have them: ToolSearchToolRegex20251119Param, ServerToolUseBlockParam,
# ToolSearchToolResultBlockParam holding a ToolSearchToolSearchResultBlockParam of
# ToolReferenceBlockParam
REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}


def searched(tool: str, input_: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant turn that searches for a tool, finds get_weather and calls it."""
    return [
        {"type": "text", "text": "Let me find a weather tool."},
        {"type": "server_tool_use", "id": "srvtoolu_01ABC", "name": tool, "input": input_},
        {
            "type": "tool_search_tool_result",
            "tool_use_id": "srvtoolu_01ABC",
            "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}],
            },
        },
        call("toolu_01XYZ", city="上海"),
    ]


def results(call_id: str, content: Any = "29°C") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content}],
    }


def call(call_id: str, name: str = "get_weather", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, **fields}


def round_trip(sent: dict[str, Any]) -> Any:
    """The neutral request of `sent`, after checking it encodes to `sent` again."""
    request, options = decode_request(copy.deepcopy(sent))
    assert encode(request, **options) == sent
    return request


@pytest.mark.parametrize(
    ("tool", "input_"), [(REGEX, {"pattern": "weather"}), (BM25, {"query": "weather today"})]
)
def test_deferred_tools_and_a_tool_search_go_back_as_they_came(
    tool: dict[str, Any], input_: dict[str, Any]
) -> None:
    sent = body(
        tools=[tool, *DEFERRED],
        messages=[
            {"role": "user", "content": "What's the weather in Shanghai?"},
            {"role": "assistant", "content": searched(tool["name"], input_)},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01XYZ", "content": "29°C"}
                ],
            },
        ],
    )
    request = round_trip(sent)  # the deferred tools are the loop's own, so it runs their calls
    assert [(t.name, t.defer_loading) for t in request.tools] == [
        ("get_weather", True),
        ("search_files", True),
    ]
    assert request.server_tools == (ServerTool(FORMAT, tool, position=0),)
    _, reply, results = request.messages
    assert [type(p).__name__ for p in reply.content] == ["Text", "Opaque", "Opaque", "ToolCall"]
    assert reply.content[3] == ToolCall("toolu_01XYZ", "get_weather", {"city": "上海"})
    assert results == ToolResults([ToolResult("toolu_01XYZ", "29°C")])


def test_a_client_side_tool_search_result_keeps_its_tool_references() -> None:
    reference = {"type": "tool_reference", "tool_name": "get_weather"}
    search = {"name": "find_tools", "input_schema": {"type": "object"}}
    sent = body(
        tools=[search, *DEFERRED],
        messages=[
            {"role": "user", "content": "Weather in Shanghai?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_01S",
                        "name": "find_tools",
                        "input": {"q": "weather"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01S", "content": [reference]}
                ],
            },
        ],
    )
    request = round_trip(sent)
    assert request.tools[0] == ToolSpec("find_tools", parameters={"type": "object"})
    assert [t.defer_loading for t in request.tools] == [False, True, True]
    assert request.messages[2] == ToolResults(
        [ToolResult("toolu_01S", [Opaque(FORMAT, reference)])]
    )


def test_a_system_prompt_of_blocks_is_kept_whole() -> None:
    system = [
        {
            "type": "text",
            "text": "You are a weather assistant.",
            "cache_control": {"type": "ephemeral"},
        },
        {
            "type": "text",
            "text": "Cite the forecast.",
            "citations": [
                {
                    "type": "char_location",
                    "cited_text": "sunny",
                    "document_index": 0,
                    "document_title": None,
                    "start_char_index": 0,
                    "end_char_index": 5,
                }
            ],
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/map.png"}},
    ]
    sent = body(system=system, messages=[{"role": "user", "content": "Weather?"}])
    request, options = decode_request(copy.deepcopy(sent))
    assert request.system is None and options["system"] == system
    assert encode(request, **options) == sent


def test_server_tools_before_function_tools_stay_in_their_place() -> None:
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    sent = body(tools=[search, WEATHER], messages=[{"role": "user", "content": "Weather?"}])
    request = round_trip(sent)
    assert request.tools == (ToolSpec("get_weather", "Current weather", WEATHER_SCHEMA),)
    assert request.server_tools == (ServerTool(FORMAT, search, position=0),)
    after = body(tools=[WEATHER, search], messages=[{"role": "user", "content": "Weather?"}])
    request = round_trip(after)  # in the usual order: the function tool is a ToolSpec
    assert request.tools == (ToolSpec("get_weather", "Current weather", WEATHER_SCHEMA),)
    assert request.server_tools == (ServerTool(FORMAT, search),)


def test_whitespace_only_text_is_kept() -> None:
    sent = body(
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": " "}, WEATHER_Q]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "\n\n"},
                    call("toolu_01", city="上海"),
                ],
            },
            results("toolu_01"),
        ],
    )
    request = round_trip(sent)
    assert request.messages[0] == UserMessage([Text(" "), Text("Weather?")])
    assert request.messages[1].content[0] == Opaque(FORMAT, {"type": "text", "text": "\n\n"})


def test_a_history_without_tools_gains_none() -> None:
    sent = body(
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [call("toolu_01")],
            },
            results("toolu_01"),
            {"role": "assistant", "content": "Shanghai is 29°C."},
            {"role": "user", "content": "Thanks! And tomorrow?"},
        ]
    )
    request = round_trip(sent)
    assert "tools" not in encode(request, model="m")
    assert request.messages[3] == AssistantMessage(
        [Text("Shanghai is 29°C.", provider_data={"string": True})]
    )


def test_thinking_citations_and_options_come_back() -> None:
    sent = body(
        tools=[WEATHER],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 512},
        temperature=1,
        stream=True,
        messages=[
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCkYIBxgC"},
                    {"type": "redacted_thinking", "data": "EmwKAhgB"},
                    call("toolu_01", city="上海"),
                ],
            },
            results("toolu_01"),
        ],
    )
    request = round_trip(sent)
    assert request.messages[1].content[:2] == [
        Thinking("Look it up.", signature="EqQBCkYIBxgC"),
        Thinking("", redacted=True, provider_data={"data": "EmwKAhgB"}),
    ]


def test_breakpoints_where_encode_puts_them_read_as_caching_on() -> None:
    trace = json.loads((FIXTURES / "weather.json").read_text(encoding="utf-8"))
    sent = trace["exchanges"][1]["request"]["body"]
    request = round_trip(sent)
    assert request.cache == CachePolicy()
    assert type(request.messages[0]) is UserMessage and not any(
        type(p) is Opaque for m in request.messages for p in getattr(m, "content", [])
    )


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_every_recorded_request_goes_back_as_it_came(name: str) -> None:
    trace = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    for exchange in trace["exchanges"]:
        round_trip(exchange["request"]["body"])


@pytest.mark.parametrize(
    ("sent", "path"),
    [
        ({"max_tokens": 1, "messages": []}, "model"),
        ({"model": "m", "messages": []}, "max_tokens"),
        ({"model": "m", "max_tokens": 1}, "messages"),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]},
            "messages[0]",
        ),
    ],
)
def test_a_body_that_is_no_request_names_what_is_wrong(sent: dict[str, Any], path: str) -> None:
    with pytest.raises(DecodeError, match=f"^{path.replace('[', '.').replace(']', '.')}"):
        decode_request(sent)
