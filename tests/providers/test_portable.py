"""A history recorded on one wire format, carried over to another by the written rules: another
format's blocks left out (a message left empty says so), thinking sent back only where its API
takes it, everything neutral kept."""

from __future__ import annotations

import pytest
from turnstile.core import ModelRequest
from turnstile.core.messages import (
    AssistantMessage,
    Message,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.providers import UnsupportedContent, anthropic_messages, openai_chat, portable
from turnstile.providers import openai_responses as responses

SEARCH = Opaque("anthropic_messages", {"type": "server_tool_use", "id": "srv_1", "name": "web"})
FOUND = Opaque("anthropic_messages", {"type": "web_search_tool_result", "tool_use_id": "srv_1"})
SIGNED = Thinking("Compare the two cities.", signature="sig-1")
REASONING = Thinking(
    "Compare.", provider_data={"type": "reasoning", "id": "rs_1", "summary": [], "content": []}
)
CHAT_EXTRA = Opaque("openai_chat", {"reasoning_content": "Compare."})

ANTHROPIC_RUN: list[Message] = [
    UserMessage("Which city is warmer?"),
    AssistantMessage(
        [SIGNED, SEARCH, FOUND, Text("Shanghai, by the search."), ToolCall("t1", "f", {})]
    ),
    ToolResults([ToolResult("t", [Text("ok"), Opaque("anthropic_messages", {"type": "x"})])]),
    AssistantMessage([SEARCH, FOUND]),
    UserMessage("And tomorrow?"),
]


def encoded(format: str, messages: list[Message]) -> dict:
    request = ModelRequest(None, messages, (), 256)
    codec = {"anthropic_messages": anthropic_messages, "openai_chat": openai_chat}.get(
        format, responses
    )
    return codec.encode(request, model="m")


def test_another_format_s_blocks_are_refused_unless_carried_over() -> None:
    with pytest.raises(UnsupportedContent):
        encoded("openai_chat", ANTHROPIC_RUN)
    carried = portable(ANTHROPIC_RUN, "openai_chat")
    body = encoded("openai_chat", carried)
    assert body["messages"][1]["content"] == "Shanghai, by the search."
    assert "server_tool_use" not in str(body) and "sig-1" not in str(body)


def test_a_message_left_with_nothing_says_what_was_left_out() -> None:
    carried = portable(ANTHROPIC_RUN, "openai_responses")
    assert carried[3] == AssistantMessage(
        [Text("(left out here: content only anthropic_messages can carry)")]
    )
    assert carried[2] == ToolResults([ToolResult("t", [Text("ok")])])
    assert len(carried) == len(ANTHROPIC_RUN)


def test_messages_that_need_no_change_are_kept_as_they_are() -> None:
    carried = portable(ANTHROPIC_RUN, "anthropic_messages")
    assert all(new is old for new, old in zip(carried, ANTHROPIC_RUN, strict=True))


@pytest.mark.parametrize("format", ["anthropic_messages", "openai_chat", "openai_responses"])
def test_thinking_goes_back_only_where_its_api_takes_it(format: str) -> None:
    history = [
        UserMessage("q"),
        AssistantMessage([SIGNED, REASONING, CHAT_EXTRA, Text("a")]),
        UserMessage("go on"),
    ]
    body = str(encoded(format, portable(history, format)))
    assert ("sig-1" in body) is (format == "anthropic_messages")
    assert ("rs_1" in body) is (format == "openai_responses")
    assert ("reasoning_content" in body) is (format == "openai_chat")


def test_an_unknown_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown wire format 'gemini'"):
        portable(ANTHROPIC_RUN, "gemini")
