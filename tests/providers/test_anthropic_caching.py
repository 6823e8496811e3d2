"""Prompt caching in the Anthropic codec: breakpoints on the tools, the system prompt, the end of
the previous request and the end of the newest message, never more than the API's 4; none when
the policy is off; and bodies encoded through a `WireCache` equal those encoded whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from pydantic import TypeAdapter
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    History,
    Instructions,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy, ServerTool
from turnstile.providers import WireCache
from turnstile.providers.anthropic_messages import encode

MARK = {"type": "ephemeral"}
ON = CachePolicy()
CHART = ToolSpec("get_chart", "A temperature chart.", {"type": "object", "properties": {}})
SEARCH = ServerTool("anthropic_messages", {"type": "web_search_20250305", "name": "web_search"})
PARAMS = TypeAdapter(MessageCreateParamsNonStreaming)


def call(n: int) -> ToolCall:
    return ToolCall(f"toolu_{n:02}", "get_chart", {"city": f"city {n}"})


def turns(n: int) -> list[Message]:
    """A prompt and `n` rounds of a call and its result."""
    history: list[Message] = [UserMessage("Which city is warmer?")]
    for i in range(n):
        history += [AssistantMessage([call(i)]), ToolResults([ToolResult(call(i).id, f"{i}°C")])]
    return history


def body(
    history: list[Message],
    cache: CachePolicy | None = ON,
    wire: WireCache | None = None,
    **fields: Any,
) -> dict[str, Any]:
    fields.setdefault("tools", (CHART,))
    request = ModelRequest("You compare cities.", History(history, len(history)), **fields,
                           max_tokens=256, cache=cache)  # fmt: skip
    out = encode(request, model="claude-sonnet-4-6", cache=wire)
    PARAMS.validate_python(out)
    return out


def marks(out: dict[str, Any]) -> list[str]:
    """Where the breakpoints are: "tools[i]", "system[i]", "messages[i][j]"."""
    found = [f"tools[{i}]" for i, t in enumerate(out.get("tools", [])) if "cache_control" in t]
    if isinstance(out.get("system"), list):
        found += [f"system[{i}]" for i, b in enumerate(out["system"]) if "cache_control" in b]
    for i, message in enumerate(out["messages"]):
        if isinstance(message["content"], list):
            found += [
                f"messages[{i}][{j}]"
                for j, b in enumerate(message["content"])
                if "cache_control" in b
            ]
    return found


def test_off_the_body_is_as_it_always_was() -> None:
    out = body(turns(1), cache=None)
    assert out["system"] == "You compare cities."
    assert out["messages"][0] == {"role": "user", "content": "Which city is warmer?"}
    assert marks(out) == []


def test_on_the_first_request_marks_tools_system_and_the_prompt() -> None:
    out = body(turns(0))
    assert out["system"] == [{"type": "text", "text": "You compare cities.", "cache_control": MARK}]
    assert out["tools"][-1]["cache_control"] == MARK
    assert out["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Which city is warmer?", "cache_control": MARK}],
        }
    ]


def test_the_end_of_the_previous_request_keeps_its_breakpoint_and_the_newest_gets_one() -> None:
    out = body(turns(3))
    assert marks(out) == ["tools[0]", "system[0]", "messages[4][0]", "messages[6][0]"]
    before = body(turns(2))
    assert marks(before)[-1] == "messages[4][0]"  # where this request found it


def test_never_more_than_four_and_the_last_tool_is_the_last_server_tool() -> None:
    out = body(turns(5), server_tools=(SEARCH,))
    assert marks(out) == ["tools[1]", "system[0]", "messages[8][0]", "messages[10][0]"]
    assert out["tools"][1] == {**SEARCH.definition, "cache_control": MARK}
    assert "cache_control" not in SEARCH.definition


def test_deferred_tools_are_not_in_the_prefix_so_the_last_loaded_tool_holds_the_mark() -> None:
    deferred = ToolSpec("get_weather", "The weather.", {"type": "object"}, defer_loading=True)
    out = body(turns(1), tools=(CHART, deferred))
    assert marks(out)[0] == "tools[0]" and out["tools"][1]["defer_loading"] is True
    only = body(turns(1), tools=(deferred,))  # none loaded: no tool holds one
    assert not any(m.startswith("tools") for m in marks(only))


def test_a_one_hour_ttl() -> None:
    out = body(turns(1), cache=CachePolicy(ttl="1h"))
    assert {json.dumps(out["tools"][-1]["cache_control"])} == {'{"type": "ephemeral", "ttl": "1h"}'}
    assert out["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_a_block_that_cannot_hold_a_breakpoint_passes_it_to_the_one_before() -> None:
    paused = AssistantMessage([Text("Let me think."), Thinking("hm", signature="sig")])
    out = body([UserMessage("q"), paused])
    assert marks(out) == ["tools[0]", "system[0]", "messages[0][0]", "messages[1][0]"]


def test_instructions_and_text_are_blocks_so_a_message_reads_the_same_marked_or_not() -> None:
    history = [*turns(1), UserMessage("And now?"), Instructions("Answer in one word.")]
    out = body(history)
    assert out["messages"][-1] == {
        "role": "system",
        "content": [{"type": "text", "text": "Answer in one word.", "cache_control": MARK}],
    }
    answer = [AssistantMessage([Text("Shanghai")]), UserMessage("Why?")]
    later = body([*history, *answer, AssistantMessage([Text("Sun.")]), UserMessage("Thanks")])
    assert later["messages"][3] == {
        "role": "system",
        "content": [{"type": "text", "text": "Answer in one word."}],
    }


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_bodies_through_a_wire_cache_equal_bodies_encoded_whole(ttl: str) -> None:
    """The breakpoints are written on copies: the cached wire form never keeps one."""
    wire = WireCache()
    policy = CachePolicy(ttl=ttl)  # type: ignore[arg-type]
    history = turns(12)
    for n in range(1, len(history) + 1):
        assert body(history[:n], policy, wire) == body(history[:n], policy)
