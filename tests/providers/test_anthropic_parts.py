"""The Anthropic codec's content beyond text: images, documents, several blocks in one turn,
parts in tool results, instructions mid-conversation and a prefill; what it cannot carry is
refused by name."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from anthropic.types import MessageParam
from pydantic import TypeAdapter
from turnstile.core import ModelRequest
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Message,
    Opaque,
    Text,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.providers import UnsupportedContent
from turnstile.providers.anthropic_messages import decode, encode

PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)  # fmt: skip
PDF_B64 = (
    "JVBERi0xLjQKJcTl8uXrp/Og0MTGCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwv"
    "Um9vdCAxIDAgUj4+CiUlRU9G"
)
PNG = Image(media_type="image/png", data=base64.b64decode(PNG_B64))
PDF = Document(media_type="application/pdf", data=base64.b64decode(PDF_B64), name="report.pdf")
PDF_BLOCK = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
    "title": "report.pdf",
}
MESSAGES = TypeAdapter(list[MessageParam])


def messages(*history: Message) -> list[dict[str, Any]]:
    body = encode(ModelRequest(None, list(history), (), 256), model="m")
    MESSAGES.validate_python(body["messages"])  # the SDK's own types say the shape is right
    return body["messages"]


def test_a_user_turn_of_several_blocks_keeps_each_in_order() -> None:
    prompt = UserMessage([Text("Which city is warmer? Use the chart and the report."), PNG, PDF])
    assert messages(prompt) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which city is warmer? Use the chart and the report."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
                PDF_BLOCK,
            ],
        }
    ]


def test_images_and_documents_by_url_file_and_plain_text() -> None:
    parts: list[Any] = [
        Image(url="https://example.com/a.png"),
        Image(file_id="file_011CNha8iCJcU1wXNR6q4V8w"),
        Document(url="https://example.com/a.pdf", title="The report"),
        Document(file_id="file_011CPMxVD3fHLUhvTqtsQA5w", name="notes.pdf", title="Notes"),
        Document(media_type="text/plain", data="北京 26°C".encode(), title="weather.txt"),
    ]
    (message,) = messages(UserMessage(parts))
    assert message["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}},
        {
            "type": "document",
            "source": {"type": "url", "url": "https://example.com/a.pdf"},
            "title": "The report",
        },
        {
            "type": "document",
            "source": {"type": "file", "file_id": "file_011CPMxVD3fHLUhvTqtsQA5w"},
            "title": "Notes",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "北京 26°C"},
            "title": "weather.txt",
        },
    ]


def test_a_tool_can_return_images_and_documents() -> None:
    call = ToolCall("toolu_01", "get_chart", {"city": "Shanghai"})
    chart = [Text("chart of Shanghai"), Image(url="https://example.com/Shanghai.png"), PDF]
    *_, results = messages(
        UserMessage("q"), AssistantMessage([call]), ToolResults([ToolResult(call.id, chart)])
    )
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [
                    {"type": "text", "text": "chart of Shanghai"},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/Shanghai.png"},
                    },
                    PDF_BLOCK,
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (Audio(b"RIFF", "audio/wav"), "audio"),
        (Image(media_type="image/bmp", data=b"BM"), "an image of type image/bmp"),
        (Document(media_type="text/csv", data=b"a,b"), "a document of type text/csv"),
        (Document(url="https://example.com/a.docx", media_type="application/msword"), "msword"),
        (Document(media_type="text/plain", data=b"\xff\xfe"), "not UTF-8"),
        (Opaque("openai_chat", {"type": "input_audio"}), "openai_chat content"),
        (Opaque("bedrock_converse", {"type": "x"}), "cannot carry bedrock_converse content"),
    ],
)
def test_a_part_the_format_cannot_carry_is_refused_by_name(part: Any, named: str) -> None:
    with pytest.raises(UnsupportedContent, match=named) as refused:
        messages(UserMessage([Text("listen"), part]))
    assert refused.value.format == "anthropic_messages"


def test_instructions_mid_conversation_are_a_system_message_after_a_user_turn() -> None:
    history = [
        UserMessage("Review the module."),
        AssistantMessage([Text("Three issues found.")]),
        UserMessage("Now performance."),
        Instructions("Focus on performance only."),
    ]
    assert messages(*history)[-2:] == [
        {"role": "user", "content": "Now performance."},
        {"role": "system", "content": "Focus on performance only."},
    ]
    developer = messages(UserMessage("q"), Instructions("Answer in Go.", role="developer"))
    assert developer[-1] == {"role": "system", "content": "Answer in Go."}


@pytest.mark.parametrize(
    "history",
    [
        [Instructions("first of all")],
        [UserMessage("q"), AssistantMessage([Text("a")]), Instructions("after a reply")],
    ],
)
def test_instructions_anywhere_but_after_a_user_turn_are_refused(history: list[Any]) -> None:
    with pytest.raises(UnsupportedContent, match="instructions that do not follow a user turn"):
        messages(*history, UserMessage("go on"))


def test_a_prefill_is_the_last_assistant_message_and_the_reply_continues_it() -> None:
    prefill = AssistantMessage([Text('{"city": "')])
    assert messages(UserMessage("Which city is warmer? JSON please."), prefill)[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": '{"city": "'}],
    }
    reply = decode(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [{"type": "text", "text": 'Shanghai"}'}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 4},
        }
    )
    assert reply.content == [Text('Shanghai"}')]
