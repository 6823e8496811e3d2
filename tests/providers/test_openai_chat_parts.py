"""Chat Completions and parts: what a user message, a tool result and mid-conversation
instructions may hold, what the codec refuses, and what a reply keeps beyond text and calls."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from turnstile.core import Loop, LoopSpec, ModelReplied, ModelRequest
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    ModelResponse,
    ModelStop,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
    validate_history,
)
from turnstile.providers import DecodeError, UnsupportedContent, WireCache, openai_chat

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = base64.b64decode(
    "JVBERi0xLjQKJcTl8uXrp/Og0MTGCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9v"
    "dCAxIDAgUj4+CiUlRU9G"
)
WAV = base64.b64decode("UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==")
PROMPT = UserMessage(
    [
        Text("Which city is warmer? Use the chart and the report."),
        Image(media_type="image/png", data=PNG),
        Document(media_type="application/pdf", data=PDF, name="report.pdf"),
    ]
)


def wire(*messages: Any) -> list[dict[str, Any]]:
    return openai_chat.encode(ModelRequest(None, list(messages), (), 256), model="m")["messages"]


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-parts",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
    }


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-parts",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def streamed(chunks: list[dict[str, Any]]) -> ModelResponse:
    acc = openai_chat.StreamAccumulator()
    for c in chunks:
        acc.feed(c)
    return acc.result()


# -- user messages ---------------------------------------------------------------------------------


def test_a_user_message_of_parts_is_a_list_of_content_parts_in_order() -> None:
    assert wire(PROMPT) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which city is warmer? Use the chart and the report."},
                {"type": "image_url", "image_url": {"url": data_url("image/png", PNG)}},
                {
                    "type": "file",
                    "file": {
                        "file_data": data_url("application/pdf", PDF),
                        "filename": "report.pdf",
                    },
                },
            ],
        }
    ]


def test_several_text_parts_stay_several_and_text_alone_stays_a_string() -> None:
    assert wire(UserMessage([Text("one"), Text("two")]))[0]["content"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    assert wire(UserMessage("plain"))[0]["content"] == "plain"


def test_an_image_by_url_keeps_its_detail() -> None:
    image = Image(url="https://example.com/chart.png", detail="low")
    assert wire(UserMessage([image]))[0]["content"] == [
        {
            "type": "image_url",
            "image_url": {"url": "https://example.com/chart.png", "detail": "low"},
        }
    ]


def test_a_document_by_file_id_is_a_file_part_naming_it_alone() -> None:
    document = Document(file_id="file-abc", name="report.pdf")
    assert wire(UserMessage([document]))[0]["content"] == [
        {"type": "file", "file": {"file_id": "file-abc"}}
    ]


def test_a_document_without_a_name_is_named_by_its_title_or_not_at_all() -> None:
    titled = Document(media_type="application/pdf", data=PDF, title="Q3 report")
    unnamed = Document(media_type="application/pdf", data=PDF)
    assert wire(UserMessage([titled]))[0]["content"][0]["file"]["filename"] == "Q3 report"
    assert "filename" not in wire(UserMessage([unnamed]))[0]["content"][0]["file"]


@pytest.mark.parametrize(
    ("media_type", "format"),
    [("audio/wav", "wav"), ("audio/x-wav", "wav"), ("audio/mpeg", "mp3"), ("audio/mp3", "mp3")],
)
def test_audio_is_input_audio_with_its_format_from_the_media_type(
    media_type: str, format: str
) -> None:
    assert wire(UserMessage([Audio(WAV, media_type)]))[0]["content"] == [
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(WAV).decode(), "format": format},
        }
    ]


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (Audio(b"OggS", "audio/ogg"), "audio of type audio/ogg"),
        (Image(file_id="file-img"), "an image by file_id"),
        (Document(url="https://example.com/report.pdf"), "a document by url"),
        (Opaque("anthropic_messages", {"type": "server_tool_use"}), "a part of anthropic_messages"),
    ],
)
def test_a_user_part_chat_cannot_carry_is_refused_by_name(part: Any, named: str) -> None:
    with pytest.raises(UnsupportedContent) as refused:
        wire(UserMessage([Text("look"), part]))
    assert (refused.value.format, refused.value.part) == ("openai_chat", named)


def test_an_opaque_part_of_chat_goes_as_it_came() -> None:
    part = {"type": "input_video", "input_video": {"url": "https://example.com/v.mp4"}}
    assert wire(UserMessage([Opaque("openai_chat", part)]))[0]["content"] == [part]


# -- tool results and instructions -----------------------------------------------------------------


def call_and(result: ToolResult) -> list[dict[str, Any]]:
    reply = AssistantMessage([ToolCall(result.call_id, "get_chart", {"city": "Shanghai"})])
    return wire(PROMPT, reply, ToolResults([result]))[2:]


def test_a_tool_result_of_text_parts_is_a_list_of_text_parts() -> None:
    result = ToolResult("call_1", [Text("chart of"), Text(" Shanghai")])
    assert call_and(result) == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": [
                {"type": "text", "text": "chart of"},
                {"type": "text", "text": " Shanghai"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (Image(media_type="image/png", data=PNG), "an image in a tool result"),
        (Document(media_type="application/pdf", data=PDF), "a document in a tool result"),
        (Opaque("openai_responses", {"type": "input_image"}), "a part of openai_responses"),
    ],
)
def test_a_tool_result_with_media_is_refused_naming_it(part: Any, named: str) -> None:
    """Chat's tool messages carry text only: no image or document reaches the model that way."""
    with pytest.raises(UnsupportedContent) as refused:
        call_and(ToolResult("call_1", [Text("chart of Shanghai"), part]))
    assert (refused.value.format, refused.value.part) == ("openai_chat", named)


def test_instructions_mid_conversation_are_system_or_developer_messages_in_place() -> None:
    messages = wire(
        UserMessage("hi"),
        AssistantMessage([Text("hello")]),
        Instructions("Answer in English."),
        Instructions("Be brief.", role="developer"),
        UserMessage("again"),
    )
    assert messages[2:4] == [
        {"role": "system", "content": "Answer in English."},
        {"role": "developer", "content": "Be brief."},
    ]
    assert [m["role"] for m in messages] == ["user", "assistant", "system", "developer", "user"]


# -- replies: what they keep beyond text and calls -------------------------------------------------

CITATION = {
    "type": "url_citation",
    "url_citation": {"start_index": 0, "end_index": 9, "title": "天气", "url": "https://w.cn"},
}


def test_annotations_are_kept_with_the_text_and_not_sent_back() -> None:
    body = completion({"content": "上海更暖和。", "refusal": None, "annotations": [CITATION]})
    ChatCompletion.model_validate(body)
    reply = openai_chat.decode(body)
    assert reply.content == [Text("上海更暖和。", provider_data={"annotations": [CITATION]})]
    assert wire(UserMessage("q"), AssistantMessage(reply.content))[1] == {
        "role": "assistant",
        "content": "上海更暖和。",
    }


def test_fields_chat_does_not_know_are_kept_in_an_opaque_part_and_sent_back() -> None:
    body = completion(
        {"content": "26°C", "reasoning_content": "先查天气", "audio": None, "reasoning_details": []}
    )
    reply = openai_chat.decode(body)
    assert reply.content == [Text("26°C"), Opaque("openai_chat", {"reasoning_content": "先查天气"})]
    assert wire(UserMessage("q"), AssistantMessage(reply.content))[1] == {
        "role": "assistant",
        "content": "26°C",
        "reasoning_content": "先查天气",
    }


def test_a_call_s_own_unknown_fields_ride_in_its_provider_data_and_go_back() -> None:
    """Gemini's OpenAI-compatible API signs each call (`extra_content`) and wants it back."""
    signed = {"google": {"thought_signature": "c2ln"}}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_chart", "arguments": '{"city":"Shanghai"}'},
        "extra_content": signed,
    }
    reply = openai_chat.decode(completion({"content": None, "tool_calls": [call]}, "tool_calls"))
    [part] = reply.content
    assert part == ToolCall(
        "call_1",
        "get_chart",
        {"city": "Shanghai"},
        provider_data={"openai_chat": {"extra_content": signed}},
    )
    assert wire(UserMessage("q"), AssistantMessage(reply.content))[1]["tool_calls"] == [call]


def test_another_format_s_call_data_is_not_sent_to_chat() -> None:
    call = ToolCall("call_1", "f", {}, provider_data={"id": "fc_1", "status": "completed"})
    assert wire(UserMessage("q"), AssistantMessage([call]))[1]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]


def test_an_assistant_opaque_of_another_format_is_refused() -> None:
    foreign = AssistantMessage([Opaque("anthropic_messages", {"type": "web_search_tool_result"})])
    with pytest.raises(UnsupportedContent, match="openai_chat cannot carry a part of anthropic"):
        wire(UserMessage("q"), foreign)


def test_a_stream_keeps_what_decode_keeps() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    chunks = [
        chunk({"role": "assistant", "content": "上海", "reasoning_content": "先"}),
        chunk({"content": "更暖和。", "reasoning_content": "查", "annotations": [CITATION]}),
        chunk({"tool_calls": [{"index": 0, **call, "extra_content": {"n": 1}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}], "seq": 7}),
        chunk({}, "tool_calls"),
    ]
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    whole = completion(
        {
            "content": "上海更暖和。",
            "reasoning_content": "先查",
            "annotations": [CITATION],
            "seq": 7,
            "tool_calls": [
                {**call, "function": {"name": "f", "arguments": "{}"}, "extra_content": {"n": 1}}
            ],
        },
        "tool_calls",
    )
    assert streamed(chunks) == openai_chat.decode(whole)
    assert streamed(chunks).content[-1] == Opaque(
        "openai_chat", {"reasoning_content": "先查", "seq": 7}
    )


def test_a_typo_in_a_call_s_type_is_a_decode_error_not_kept() -> None:
    call = {"id": "call_1", "type": "functoin", "function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(DecodeError) as raised:
        openai_chat.decode(completion({"tool_calls": [call]}, "tool_calls"))
    assert raised.value.path == "choices[0].message.tool_calls[0].type"


def test_kept_fields_nested_too_deep_are_a_decode_error() -> None:
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    with pytest.raises(DecodeError, match="nested deeper"):
        openai_chat.decode(completion({"content": "x", "vendor": deep}))


def test_a_loop_takes_a_reply_with_kept_fields_and_sends_them_back() -> None:
    loop = Loop(LoopSpec())
    [ask] = loop.start("q", 0.0)
    reply = openai_chat.decode(completion({"content": "a", "reasoning_content": "r"}))
    loop.send(ModelReplied(command_id=ask.id, response=reply, now=1.0))
    validate_history(loop.state.messages)
    again = Loop.load(LoopSpec(), loop.dump())
    assert again.state.messages == loop.state.messages


# -- the round trip --------------------------------------------------------------------------------


def test_media_in_the_prompt_round_trip_into_the_next_request() -> None:
    """Encode the prompt, decode the reply, encode the next request: the prompt's parts go out
    again unchanged, the reply as it came."""
    first = openai_chat.encode(ModelRequest(None, [PROMPT], (), 256), model="m")
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_chart", "arguments": '{"city":"Shanghai"}'},
    }
    reply = openai_chat.decode(completion({"content": None, "tool_calls": [call]}, "tool_calls"))
    assert reply.stop is ModelStop.tool_use and reply.usage == Usage()
    history = [
        PROMPT,
        AssistantMessage(reply.content),
        ToolResults([ToolResult("call_1", "chart of Shanghai")]),
    ]
    second = openai_chat.encode(ModelRequest(None, history, (), 256), model="m")
    assert second["messages"][0] == first["messages"][0]
    assert second["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "chart of Shanghai"},
    ]


# -- assistant messages as other clients wrote them ------------------------------------------------

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_chart", "arguments": '{"city":"Shanghai"}'},
}


def test_assistant_text_sent_as_a_list_of_parts_goes_back_as_a_list() -> None:
    """A text kept with its content part's fields (`provider_data["openai_chat"]`) makes its
    message's content a list of parts again; text without stays one string."""
    recorded = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Looking."}],
        "tool_calls": [CALL],
    }
    part = Text("Looking.", provider_data={"openai_chat": {"type": "text"}})
    call = ToolCall("call_1", "get_chart", {"city": "Shanghai"})
    assert wire(UserMessage("q"), AssistantMessage([part, call]))[1] == recorded
    plain = wire(UserMessage("q"), AssistantMessage([Text("Looking."), call]))[1]
    assert plain == {**recorded, "content": "Looking."}
    two = AssistantMessage([part, Text(" Done.")])
    assert wire(UserMessage("q"), two)[1]["content"] == [
        {"type": "text", "text": "Looking."},
        {"type": "text", "text": " Done."},
    ]


def test_whitespace_only_text_is_sent_as_it_is() -> None:
    sent = wire(UserMessage(" "), AssistantMessage([Text("\n")]), UserMessage([Text("  ")]))
    assert [m["content"] for m in sent] == [" ", "\n", [{"type": "text", "text": "  "}]]


def test_tool_messages_name_their_tool_when_asked() -> None:
    """`name_results=True`: each tool message says the name of the call it answers, as some
    clients send it (and some servers want it), found in the history, cached or not."""
    history = [
        UserMessage("q"),
        AssistantMessage([ToolCall("call_1", "get_chart", {"city": "Shanghai"})]),
        ToolResults([ToolResult("call_1", "29°C")]),
    ]
    request = ModelRequest(None, history, (), 256)
    assert openai_chat.encode(request, model="m", name_results=True)["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "29°C",
        "name": "get_chart",
    }
    assert "name" not in openai_chat.encode(request, model="m")["messages"][2]
    cache = WireCache()
    openai_chat.encode(
        ModelRequest(None, history[:2], (), 256), model="m", cache=cache, name_results=True
    )
    again = openai_chat.encode(request, model="m", cache=cache, name_results=True)
    assert again["messages"][2]["name"] == "get_chart"
    assert "name_results" not in again


def test_thinking_still_goes_nowhere() -> None:
    assert wire(UserMessage("q"), AssistantMessage([Thinking("hm"), Text("a")]))[1] == {
        "role": "assistant",
        "content": "a",
    }


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
def test_a_kept_field_holding_a_number_json_cannot_is_a_decode_error(number: float) -> None:
    """Python's parser reads `NaN` and `Infinity`, which no run can write down again."""
    with pytest.raises(DecodeError, match="not a finite number") as raised:
        openai_chat.decode(completion({"content": "x", "vendor": {"score": [number]}}))
    assert raised.value.path == "choices[0].message.vendor"
