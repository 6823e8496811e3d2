"""The OpenAI Responses codec: parts of user messages and tool results, instructions, and the
items of a reply it does not know, both ways."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem
from pydantic import TypeAdapter
from turnstile.core import ModelRequest
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Opaque,
    Text,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.providers import UnsupportedContent
from turnstile.providers.openai_responses import encode

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n"
INPUT_ITEM = TypeAdapter(ResponseInputItemParam)
OUTPUT_ITEM = TypeAdapter(ResponseOutputItem)


def sent(*messages: Any) -> list[dict[str, Any]]:
    return encode(ModelRequest(None, list(messages), (), 64), model="m")["input"]


def test_a_user_message_of_parts_is_one_message_of_input_parts() -> None:
    message = UserMessage(
        [
            Text("Which city is warmer?"),
            Image("image/png", PNG),
            Image(url="https://example.com/a.png", detail="low"),
            Image(file_id="file-img"),
            Document("application/pdf", PDF, name="report.pdf", title="not carried"),
            Document(url="https://example.com/r.pdf"),
            Document(file_id="file-doc", name="r.pdf"),
            Text("Use both."),
        ]
    )
    (item,) = sent(message)
    png = base64.b64encode(PNG).decode()
    assert item == {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Which city is warmer?"},
            {"type": "input_image", "detail": "auto", "image_url": f"data:image/png;base64,{png}"},
            {"type": "input_image", "detail": "low", "image_url": "https://example.com/a.png"},
            {"type": "input_image", "detail": "auto", "file_id": "file-img"},
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQK",
                "filename": "report.pdf",
            },
            {"type": "input_file", "file_url": "https://example.com/r.pdf"},
            {"type": "input_file", "file_id": "file-doc", "filename": "r.pdf"},
            {"type": "input_text", "text": "Use both."},
        ],
    }
    INPUT_ITEM.validate_python(item)


def test_a_tool_result_of_parts_is_an_output_list() -> None:
    call = ToolCall("call_1", "get_chart", {"city": "Shanghai"})
    result = ToolResult(
        "call_1",
        [
            Text("chart of Shanghai"),
            Image(url="https://example.com/Shanghai.png"),
            Document("text/plain", b"hi", name="notes.txt"),
        ],
    )
    item = sent(UserMessage("q"), AssistantMessage([call]), ToolResults([result]))[-1]
    assert item == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "chart of Shanghai"},
            {
                "type": "input_image",
                "detail": "auto",
                "image_url": "https://example.com/Shanghai.png",
            },
            {
                "type": "input_file",
                "file_data": "data:text/plain;base64,aGk=",
                "filename": "notes.txt",
            },
        ],
    }
    INPUT_ITEM.validate_python(item)


@pytest.mark.parametrize("role", ["system", "developer"])
def test_instructions_mid_conversation_are_a_message_of_their_role(role: Any) -> None:
    items = sent(UserMessage("q"), Instructions("Answer in English.", role), UserMessage("again"))
    assert items[1] == {"type": "message", "role": role, "content": "Answer in English."}
    INPUT_ITEM.validate_python(items[1])


@pytest.mark.parametrize(
    ("message", "part"),
    [
        (UserMessage([Audio(b"RIFF", "audio/wav")]), "audio in a user message"),
        (
            UserMessage([Opaque("anthropic_messages", {"type": "search_result"})]),
            "anthropic_messages content in a user message",
        ),
        (
            ToolResults([ToolResult("c", [Opaque("openai_chat", {"type": "input_audio"})])]),
            "openai_chat content in a tool result",
        ),
    ],
)
def test_a_part_this_format_cannot_carry_is_refused_by_name(message: Any, part: str) -> None:
    with pytest.raises(UnsupportedContent) as raised:
        sent(message)
    assert (raised.value.format, raised.value.part) == ("openai_responses", part)
    assert "openai_responses cannot carry" in str(raised.value)


def test_an_opaque_part_of_this_format_goes_as_it_came() -> None:
    part = {"type": "input_image", "detail": "high", "file_id": "f", "prompt_cache_breakpoint": {}}
    (item,) = sent(UserMessage([Opaque("openai_responses", part)]))
    assert item["content"] == [part]
    assert item["content"][0] is not part


def test_kept_items_of_a_reply_go_back_verbatim_in_order_and_other_formats_stay_out() -> None:
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": None}
    reply = AssistantMessage(
        [
            Opaque("openai_responses", search),
            Opaque("anthropic_messages", {"type": "server_tool_use", "id": "srvtoolu_1"}),
            Text("It is"),
            Text(" sunny.", provider_data={"annotations": [{"type": "url_citation"}]}),
        ]
    )
    items = sent(UserMessage("q"), reply)
    assert items[1:] == [
        search,
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "It is"},
                {
                    "type": "output_text",
                    "text": " sunny.",
                    "annotations": [{"type": "url_citation"}],
                },
            ],
        },
    ]
    assert items[1] is not search


def test_texts_of_different_phases_go_back_as_separate_messages() -> None:
    reply = AssistantMessage(
        [
            Text("Let me look.", provider_data={"phase": "commentary"}),
            Text("Shanghai is warmer.", provider_data={"phase": "final_answer"}),
        ]
    )
    items = sent(UserMessage("q"), reply)[1:]
    assert [(i["phase"], i["content"][0]["text"]) for i in items] == [
        ("commentary", "Let me look."),
        ("final_answer", "Shanghai is warmer."),
    ]
