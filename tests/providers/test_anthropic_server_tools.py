"""The Anthropic codec and blocks it has no neutral form for: server tools' calls and results,
and any block type newer than the codec, kept verbatim (in streams too) and sent back; a client
block with a typo is an error, not a new type; citations ride along on text."""

from __future__ import annotations

import copy
import json
import typing
from typing import Any

import pytest
from anthropic.types import ContentBlock
from anthropic.types.beta import BetaContentBlock
from pydantic import TypeAdapter
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import AssistantMessage, ModelStop, Opaque, Text, UserMessage
from turnstile.core.request import ServerTool
from turnstile.providers import UnsupportedContent
from turnstile.providers._errors import DecodeError
from turnstile.providers.anthropic_messages import StreamAccumulator, decode, encode

SEARCH_CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "name": "web_search",
    "input": {"query": "Shanghai weather today"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://example.com/shanghai",
            "title": "Shanghai weather",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y",
            "page_age": "April 30, 2025",
        }
    ],
}
CITED = {
    "type": "text",
    "text": "Shanghai is 29°C.",
    "citations": [
        {
            "type": "web_search_result_location",
            "url": "https://example.com/shanghai",
            "title": "Shanghai weather",
            "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
            "cited_text": "Shanghai: sunny, 29°C",
        }
    ],
}
WEB_SEARCH = ServerTool("anthropic_messages", {"type": "web_search_20250305", "name": "web_search"})


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def stream(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of `body` streamed as the API does: text in deltas, citations one delta each,
    a tool call's input as JSON fragments, every other block whole at its start."""
    start = {**body, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(body["content"]):
        deltas: list[dict[str, Any]] = []
        first = block
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [
                {"type": "citations_delta", "citation": c} for c in block.get("citations", [])
            ]
            deltas += [{"type": "text_delta", "text": block["text"][:5]}]
            deltas += [{"type": "text_delta", "text": block["text"][5:]}]
        elif "input" in block:
            first = {**block, "input": {}}
            text = json.dumps(block["input"], ensure_ascii=False)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (text[:7], text[7:])]
        events.append({"type": "content_block_start", "index": i, "content_block": first})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": body["stop_reason"]}, "usage": {}}
    )
    events.append({"type": "message_stop"})
    return events


def accumulate(body: dict[str, Any]) -> Any:
    acc = StreamAccumulator()
    for event in stream(body):
        acc.feed(event)
    return acc.result()


def test_server_tool_blocks_are_kept_verbatim_and_citations_ride_on_text() -> None:
    body = message([SEARCH_CALL, SEARCH_RESULT, CITED])
    TypeAdapter(list[ContentBlock]).validate_python(body["content"])
    reply = decode(copy.deepcopy(body))
    assert reply.content == [
        Opaque("anthropic_messages", SEARCH_CALL),
        Opaque("anthropic_messages", SEARCH_RESULT),
        Text("Shanghai is 29°C.", provider_data={"citations": CITED["citations"]}),
    ]
    assert accumulate(body) == reply


@pytest.mark.parametrize(
    "block",
    [
        {
            "type": "mcp_tool_use",
            "id": "mcptoolu_01",
            "name": "echo",
            "server_name": "s",
            "input": {},
        },
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_01", "is_error": False, "content": []},
        {"type": "container_upload", "file_id": "file_01"},
        {"type": "compaction", "content": "what was said"},
        {"type": "a_block_from_2031", "anything": [1, {"nested": True}]},
    ],
)
def test_a_block_type_the_codec_does_not_know_is_kept_whole(block: dict[str, Any]) -> None:
    body = message([block, {"type": "text", "text": "done"}])
    assert decode(body).content == [Opaque("anthropic_messages", block), Text("done")]
    assert accumulate(body).content == decode(body).content


def test_kept_blocks_go_back_verbatim_in_the_next_request() -> None:
    reply = decode(message([SEARCH_CALL, SEARCH_RESULT, CITED]))
    history = [UserMessage("Which city is warmer?"), AssistantMessage(reply.content)]
    body = encode(ModelRequest(None, [*history, UserMessage("thanks")], (), 256), model="m")
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [SEARCH_CALL, SEARCH_RESULT, CITED],
    }


def test_another_formats_block_is_refused_not_dropped() -> None:
    foreign = AssistantMessage([Opaque("openai_responses", {"type": "web_search_call"})])
    with pytest.raises(UnsupportedContent, match="cannot carry openai_responses content"):
        encode(
            ModelRequest(None, [UserMessage("q"), foreign, UserMessage("go")], (), 256), model="m"
        )


def test_server_tools_of_this_format_join_the_client_tools() -> None:
    other = ServerTool("openai_responses", {"type": "web_search"})
    request = ModelRequest(
        None, [UserMessage("q")], (ToolSpec("get_chart"),), 256, server_tools=(WEB_SEARCH, other)
    )
    assert encode(request, model="m")["tools"] == [
        {"name": "get_chart", "input_schema": {"type": "object", "properties": {}}},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    alone = ModelRequest(None, [UserMessage("q")], (), 256, server_tools=(WEB_SEARCH,))
    assert encode(alone, model="m")["tools"] == [WEB_SEARCH.definition]


def test_pause_turn_is_a_pause() -> None:
    assert decode(message([SEARCH_CALL, SEARCH_RESULT], "pause_turn")).stop is ModelStop.pause


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ({"type": "tool_uze", "id": "toolu_01", "name": "get_chart", "input": {}}, "tool_use"),
        ({"type": "txt", "text": "hi"}, "text"),
        ({"type": "Thinkng", "thinking": "hm", "signature": "s"}, "thinking"),
        ({"type": "redacted_thinkin", "data": "x"}, "redacted_thinking"),
    ],
)
def test_a_misspelt_client_block_is_an_error(block: dict[str, Any], path: str) -> None:
    with pytest.raises(DecodeError, match=f"content\\[0\\].type: .*a misspelling of '{path}'"):
        decode(message([block]))
    with pytest.raises(DecodeError, match="a misspelling"):
        accumulate(message([block]))


def test_a_client_tool_call_without_its_id_is_an_error() -> None:
    with pytest.raises(DecodeError, match=r"content\[0\].id: missing"):
        decode(message([{"type": "tool_use", "name": "get_chart", "input": {}}]))


def test_no_block_type_the_sdk_knows_reads_as_a_misspelling() -> None:
    """The rule that tells a typo from a new type, checked against every type the API has."""
    kinds: set[str] = set()
    for union in (ContentBlock, BetaContentBlock):
        for member in typing.get_args(typing.get_args(union)[0]):
            kinds |= set(typing.get_args(member.model_fields["type"].annotation))
    known = {"text", "thinking", "redacted_thinking", "tool_use"}
    for kind in sorted(kinds - known):
        block = {"type": kind, "id": "x", "name": "y", "input": {}}
        assert decode(message([block])).content == [Opaque("anthropic_messages", block)], kind


def test_citations_delta_onto_a_block_that_started_with_null_citations() -> None:
    acc = StreamAccumulator()
    events = stream(message([CITED]))
    events[1]["content_block"]["citations"] = None  # as the API writes a block without them
    for event in events:
        acc.feed(event)
    assert acc.result().content == decode(message([CITED])).content


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_a_kept_block_holding_a_number_json_has_not_is_an_error(number: float) -> None:
    """Python's JSON parser reads NaN and Infinity: no API sends them, no run keeps them."""
    with pytest.raises(DecodeError, match=r"content\[0\]: holds"):
        decode(message([{"type": "a_block_from_2031", "score": number}]))
    cited = {**CITED, "citations": [{**CITED["citations"][0], "cited_text": number}]}
    with pytest.raises(DecodeError, match=r"content\[0\].citations: holds"):
        decode(message([cited]))
