"""Chat Completions request options the loop decides: prompt caching, strict tools, tool choice,
the token limit field, server tools and native structured output."""

from __future__ import annotations

import itertools
import json
from typing import Any

import openai
import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter
from turnstile.core import (
    CallModel,
    Guards,
    Loop,
    LoopSpec,
    ModelReplied,
    ModelRequest,
    RunTool,
    StopReason,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy, OutputFormat, ServerTool, UseTool
from turnstile.providers import WireCache, openai_chat

CREATE = TypeAdapter(CompletionCreateParamsNonStreaming)
CHART = ToolSpec("get_chart", "A city's temperature chart.", {"type": "object"})
STRICT = ToolSpec("get_chart", "A city's temperature chart.", {"type": "object"}, strict=True)
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def encode(**fields: Any) -> dict[str, Any]:
    options = fields.pop("options", {})
    request = ModelRequest(None, [UserMessage("q")], fields.pop("tools", (CHART,)), 64, **fields)
    return openai_chat.encode(request, model="m", **options)


# -- caching ---------------------------------------------------------------------------------------


def test_caching_sends_the_loop_s_key_as_prompt_cache_key() -> None:
    body = encode(cache=CachePolicy(), cache_key="turnstile-abc")
    assert body["prompt_cache_key"] == "turnstile-abc"


def test_the_policy_s_own_key_wins_over_the_loop_s() -> None:
    body = encode(cache=CachePolicy(key="my-app"), cache_key="turnstile-abc")
    assert body["prompt_cache_key"] == "my-app"


@pytest.mark.parametrize(
    "fields",
    [
        {"cache": None, "cache_key": "turnstile-abc"},
        {"cache": CachePolicy(enabled=False, key="k"), "cache_key": "turnstile-abc"},
        {"cache": CachePolicy()},
    ],
)
def test_no_caching_or_no_key_sends_no_prompt_cache_key(fields: dict[str, Any]) -> None:
    assert "prompt_cache_key" not in encode(**fields)


def test_the_sdk_takes_prompt_cache_key() -> None:
    """A documented parameter of the installed SDK's `create`, so the body is one it sends."""
    from openai.types.chat import completion_create_params

    assert "prompt_cache_key" in completion_create_params.CompletionCreateParamsBase.__annotations__


# -- tools -----------------------------------------------------------------------------------------


def test_strict_is_written_per_tool_and_omitted_when_none() -> None:
    tools = encode(tools=(STRICT, ToolSpec("loose", strict=False), CHART))["tools"]
    assert [t["function"].get("strict") for t in tools] == [True, False, None]
    assert "strict" not in tools[2]["function"]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("required", "required"),
        ("none", "none"),
        (UseTool("get_chart"), {"type": "function", "function": {"name": "get_chart"}}),
    ],
)
def test_tool_choice_comes_from_the_request(choice: Any, wire: Any) -> None:
    assert encode(tool_choice=choice)["tool_choice"] == wire


def test_auto_is_the_api_s_default_and_is_left_out() -> None:
    assert "tool_choice" not in encode(tool_choice="auto")


def test_no_tools_means_no_tool_choice_none() -> None:
    """The API refuses a tool_choice without tools; with none, "none" says nothing more."""
    assert "tool_choice" not in encode(tools=(), tool_choice="none")


def test_a_client_wide_tool_choice_option_still_wins() -> None:
    body = encode(tool_choice="required", options={"tool_choice": "none"})
    assert body["tool_choice"] == "none"


def test_allowed_tools_go_as_the_tool_choice_option_verbatim() -> None:
    """Chat's `allowed_tools` choice (a subset the model may, or must, call from, the tools
    staying the same for the cache) is a client option, sent as given."""
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [{"type": "function", "function": {"name": "get_chart"}}],
        },
    }
    body = encode(tools=(CHART, ToolSpec("get_time")), options={"tool_choice": allowed})
    assert body["tool_choice"] == allowed
    CREATE.validate_python(body)


def test_a_history_of_calls_asked_without_tools_gets_no_tools() -> None:
    """A request for a history whose tools are gone (a final answer, a summary) sends none: the
    calls and results in the history need no definitions in this format."""
    call = ToolCall("call_1", "get_chart", {"city": "Shanghai"})
    history = [
        UserMessage("q"),
        AssistantMessage([call]),
        ToolResults([ToolResult("call_1", "29°C")]),
    ]
    body = openai_chat.encode(ModelRequest(None, history, (), 64, tool_choice="none"), model="m")
    assert "tools" not in body and "tool_choice" not in body
    CREATE.validate_python(body)


# -- the token limit field -------------------------------------------------------------------------


def test_the_token_limit_field_is_max_completion_tokens_unless_asked() -> None:
    assert encode()["max_completion_tokens"] == 64
    body = encode(options={"token_limit_field": "max_tokens"})
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body
    assert "token_limit_field" not in body


def test_an_unknown_token_limit_field_is_refused() -> None:
    with pytest.raises(ValueError, match="token_limit_field"):
        encode(options={"token_limit_field": "max_output_tokens"})


def test_the_client_takes_the_token_limit_field() -> None:
    sdk = openai.OpenAI(api_key="test")
    client = openai_chat.Client(sdk, token_limit_field="max_tokens")
    request = ModelRequest(None, [UserMessage("q")], (), 64)
    assert client._body(request)["max_tokens"] == 64
    with pytest.raises(ValueError, match="token_limit_field"):
        openai_chat.Client(sdk, token_limit_field="max_output_tokens")  # type: ignore[arg-type]


# -- server tools ----------------------------------------------------------------------------------

SEARCH = ServerTool("openai_chat", {"web_search_options": {"search_context_size": "low"}})
CUSTOM = ServerTool("openai_chat", {"type": "custom", "custom": {"name": "grep"}})


def test_a_server_definition_with_a_type_joins_the_tools_and_one_without_is_body_fields() -> None:
    body = encode(server_tools=(SEARCH, CUSTOM))
    assert body["web_search_options"] == {"search_context_size": "low"}
    assert body["tools"][1:] == [{"type": "custom", "custom": {"name": "grep"}}]


def test_a_typed_server_definition_with_a_position_stands_there_among_the_tools() -> None:
    placed = ServerTool("openai_chat", CUSTOM.definition, position=0)
    names = [
        t.get("function", t.get("custom"))["name"] for t in encode(server_tools=(placed,))["tools"]
    ]
    assert names == ["grep", "get_chart"]


def test_a_deferred_tool_is_loaded_whole_chat_having_no_tool_search() -> None:
    deferred = ToolSpec("get_chart", CHART.description, CHART.parameters, defer_loading=True)
    assert encode(tools=(deferred,))["tools"] == encode(tools=(CHART,))["tools"]


def test_server_tools_of_other_formats_are_left_out() -> None:
    other = ServerTool("anthropic_messages", {"type": "web_search_20250305", "name": "web_search"})
    body = encode(tools=(), server_tools=(other,))
    assert "tools" not in body and set(body) == {"model", "messages", "max_completion_tokens"}


def test_a_server_definition_may_not_overwrite_what_the_request_sets() -> None:
    clash = ServerTool("openai_chat", {"messages": []})
    with pytest.raises(ValueError, match="messages"):
        encode(server_tools=(clash,))


# -- native structured output ----------------------------------------------------------------------


def test_output_is_a_json_schema_response_format() -> None:
    body = encode(output=OutputFormat("Weather", SCHEMA))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Weather", "schema": SCHEMA, "strict": True},
    }
    loose = encode(output=OutputFormat("Weather", SCHEMA, strict=False))
    assert loose["response_format"]["json_schema"]["strict"] is False
    assert "response_format" not in encode()


def test_fifty_turns_each_body_begins_with_the_bytes_of_the_one_before() -> None:
    """What OpenAI caches is the longest prefix it has seen: through a 50-turn run encoded as a
    client encodes it (one WireCache), every body repeats the last one's tools and messages
    byte for byte, and carries the same key."""
    spec = LoopSpec(tools=(CHART,), guards=Guards(max_turns=60, max_repeated_calls=None))
    loop, cache = Loop(spec), WireCache()
    pending, sent = loop.start("Chart fifty cities.", 0.0), []
    while pending:
        command = pending.pop(0)
        if type(command) is RunTool:
            pending += loop.send(ToolReturned(call_id=command.id, content="chart", now=1.0))
        elif type(command) is CallModel:
            sent.append(openai_chat.encode(command.request, model="m", cache=cache))
            n = len(sent)
            call = ToolCall(f"call_{n}", "get_chart", {"city": f"city {n}"})
            reply = (
                ModelResponse([call], ModelStop.tool_use)
                if n < 50
                else ModelResponse([Text("done")], ModelStop.end_turn)
            )
            pending += loop.send(ModelReplied(command_id=command.id, response=reply, now=1.0))
    assert len(sent) == 50 and loop.state.stop_reason is StopReason.completed
    for before, after in itertools.pairwise(sent):
        head = json.dumps(before["messages"], ensure_ascii=False)[:-1]  # without its last "]"
        assert json.dumps(after["messages"], ensure_ascii=False).startswith(head)
        assert json.dumps(after["tools"]) == json.dumps(before["tools"])
    assert len({b["prompt_cache_key"] for b in sent}) == 1
