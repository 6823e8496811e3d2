import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import trio
from turnstile.core import TurnstileError
from turnstile.providers._offline import replay_client
from turnstile.providers._sse import events_json
from turnstile.providers._transport import (
    AsyncRecordingTransport,
    AsyncReplayTransport,
    Exchange,
    RecordedRequest,
    RecordedResponse,
    RecordingTransport,
    ReplayMismatch,
    ReplayTransport,
    Trace,
    TraceError,
)

PROMPT = "北京和上海哪个更暖和?"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "查询城市的实时天气",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "城市名,例如 北京"}},
        "required": ["city"],
    },
}


def sse_text(events: list[tuple[str | None, dict[str, Any] | str]]) -> str:
    lines = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        lines.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(lines)


def exchange(path: str, body: dict[str, Any], response: RecordedResponse) -> Exchange:
    return Exchange(RecordedRequest(method="POST", path=path, body=body), response)


# Anthropic Messages -------------------------------------------------------------------------

A_REQUEST = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": PROMPT}],
    "tools": [
        {
            "name": "get_weather",
            "description": "查询城市的实时天气",
            "input_schema": WEATHER_TOOL["parameters"],
        }
    ],
}
A_MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "text", "text": "我来帮您查询北京和上海的实时天气。"},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "北京"}},
        {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "上海"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 512, "output_tokens": 121},
}
A_STREAM = sse_text(
    [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **A_MESSAGE,
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 512, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "我来帮您查询"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "北京和上海的实时天气。"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {},
                },
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "北'},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '京"}'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 121},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
)


def anthropic_trace() -> Trace:
    return Trace(
        provider="anthropic",
        hand_written=True,
        description="test trace modelled on the seed conversation",
        exchanges=[
            exchange(
                "/v1/messages",
                A_REQUEST,
                RecordedResponse(
                    status=200,
                    headers={"content-type": "application/json", "request-id": "req_1"},
                    body=A_MESSAGE,
                ),
            ),
            exchange(
                "/v1/messages",
                {**A_REQUEST, "stream": True},
                RecordedResponse(status=200, headers={"request-id": "req_2"}, sse=A_STREAM),
            ),
        ],
    )


def call_anthropic(client: Any, **extra: Any) -> Any:
    return client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": PROMPT}],
        tools=[
            {
                "name": "get_weather",
                "description": "查询城市的实时天气",
                "input_schema": WEATHER_TOOL["parameters"],
            }
        ],
        **extra,
    )


def check_anthropic_message(message: anthropic.types.Message) -> None:
    assert isinstance(message, anthropic.types.Message)
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text"
    assert message.content[0].text == "我来帮您查询北京和上海的实时天气。"
    calls = [(b.id, b.input) for b in message.content if b.type == "tool_use"]
    assert calls == [("toolu_01A", {"city": "北京"}), ("toolu_01B", {"city": "上海"})]
    assert message.usage.input_tokens == 512


def stream_payloads(text: str, *, skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [p for p in events_json(text) if p.get("type") not in skip]


def test_anthropic_sync_replay_gives_sdk_objects() -> None:
    client, transport = replay_client(anthropic_trace())
    assert isinstance(client, anthropic.Anthropic)
    check_anthropic_message(call_anthropic(client))
    events = list(call_anthropic(client, stream=True))
    assert [e.to_dict() for e in events] == stream_payloads(A_STREAM, skip=("ping",))
    assert transport.remaining == []


def test_anthropic_stream_helper_accumulates_the_chunked_stream() -> None:
    client, _ = replay_client(anthropic_trace())
    call_anthropic(client)
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": PROMPT}],
        tools=A_REQUEST["tools"],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "我来帮您查询北京和上海的实时天气。"
    assert final.content[1].input == {"city": "北京"}
    assert final.usage.output_tokens == 121


# OpenAI Chat Completions --------------------------------------------------------------------

C_REQUEST = {
    "model": "gpt-4.1",
    "messages": [{"role": "user", "content": PROMPT}],
    "tools": [{"type": "function", "function": WEATHER_TOOL}],
}
C_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1730000000,
    "model": "gpt-4.1",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "我来帮您查询北京和上海的实时天气。",
                "tool_calls": [
                    {
                        "id": "call_A",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "北京"}'},
                    },
                    {
                        "id": "call_B",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "上海"}'},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 512, "completion_tokens": 121, "total_tokens": 633},
}


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1730000001,
        "model": "gpt-4.1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


C_STREAM = sse_text(
    [
        (None, chat_chunk({"role": "assistant", "content": ""})),
        (None, chat_chunk({"content": "我来帮您查询"})),
        (None, chat_chunk({"content": "北京和上海的实时天气。"})),
        (
            None,
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_A",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
        ),
        (
            None,
            chat_chunk(
                {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "北京"}'}}]}
            ),
        ),
        (None, chat_chunk({}, "tool_calls")),
        (None, "[DONE]"),
    ]
)


def chat_trace() -> Trace:
    return Trace(
        provider="openai-chat",
        hand_written=True,
        exchanges=[
            exchange(
                "/v1/chat/completions",
                C_REQUEST,
                RecordedResponse(
                    status=200,
                    headers={"content-type": "application/json", "x-request-id": "req_c1"},
                    body=C_COMPLETION,
                ),
            ),
            exchange(
                "/v1/chat/completions",
                {**C_REQUEST, "stream": True},
                RecordedResponse(status=200, sse=C_STREAM),
            ),
        ],
    )


def call_chat(client: Any, **extra: Any) -> Any:
    return client.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": PROMPT}],
        tools=[{"type": "function", "function": WEATHER_TOOL}],
        **extra,
    )


def check_chat_completion(completion: openai.types.chat.ChatCompletion) -> None:
    assert isinstance(completion, openai.types.chat.ChatCompletion)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "我来帮您查询北京和上海的实时天气。"
    calls = [(c.id, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    assert calls == [("call_A", {"city": "北京"}), ("call_B", {"city": "上海"})]


def test_openai_chat_sync_replay_gives_sdk_objects() -> None:
    client, transport = replay_client(chat_trace())
    assert isinstance(client, openai.OpenAI)
    check_chat_completion(call_chat(client))
    chunks = list(call_chat(client, stream=True))
    assert [c.to_dict() for c in chunks] == stream_payloads(C_STREAM)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "我来帮您查询北京和上海的实时天气。"
    assert transport.remaining == []


# OpenAI Responses ---------------------------------------------------------------------------

R_REQUEST = {
    "model": "gpt-5",
    "input": [{"role": "user", "content": PROMPT}],
    "tools": [{"type": "function", "strict": False, **WEATHER_TOOL}],
}
R_OUTPUT = [
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": "gAAAAB-opaque",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_A",
        "name": "get_weather",
        "arguments": '{"city":"北京"}',
        "status": "completed",
    },
]
R_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1730000000,
    "status": "completed",
    "model": "gpt-5",
    "output": R_OUTPUT,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 512,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 121,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 633,
    },
}
R_STREAM = sse_text(
    [
        (
            "response.created",
            {
                "type": "response.created",
                "sequence_number": 0,
                "response": {**R_RESPONSE, "status": "in_progress", "output": [], "usage": None},
            },
        ),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "sequence_number": 1,
                "output_index": 0,
                "item": {**R_OUTPUT[1], "arguments": "", "status": "in_progress"},
            },
        ),
        (
            "response.function_call_arguments.delta",
            {
                "type": "response.function_call_arguments.delta",
                "sequence_number": 2,
                "item_id": "fc_1",
                "output_index": 0,
                "delta": '{"city":"北京"}',
            },
        ),
        (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "sequence_number": 3,
                "output_index": 0,
                "item": R_OUTPUT[1],
            },
        ),
        (
            "response.completed",
            {"type": "response.completed", "sequence_number": 4, "response": R_RESPONSE},
        ),
    ]
)


def responses_trace() -> Trace:
    return Trace(
        provider="openai-responses",
        hand_written=True,
        exchanges=[
            exchange(
                "/v1/responses",
                R_REQUEST,
                RecordedResponse(status=200, body=R_RESPONSE),
            ),
            exchange(
                "/v1/responses",
                {**R_REQUEST, "stream": True},
                RecordedResponse(status=200, sse=R_STREAM),
            ),
        ],
    )


def call_responses(client: Any, **extra: Any) -> Any:
    return client.responses.create(
        model="gpt-5",
        input=[{"role": "user", "content": PROMPT}],
        tools=[{"type": "function", "strict": False, **WEATHER_TOOL}],
        **extra,
    )


def check_response(response: openai.types.responses.Response) -> None:
    assert isinstance(response, openai.types.responses.Response)
    reasoning, call = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content == "gAAAAB-opaque"
    assert call.type == "function_call"
    assert (call.id, call.call_id, json.loads(call.arguments)) == (
        "fc_1",
        "call_A",
        {"city": "北京"},
    )
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 64


def test_openai_responses_sync_replay_gives_sdk_objects() -> None:
    client, transport = replay_client(responses_trace())
    check_response(call_responses(client))
    events = list(call_responses(client, stream=True))
    assert [e.type for e in events] == [p["type"] for p in events_json(R_STREAM)]
    assert events[2].delta == '{"city":"北京"}'
    check_response(events[-1].response)
    assert transport.remaining == []


# Async, under trio and asyncio ---------------------------------------------------------------


def run_async(backend: str, main: Callable[[], Awaitable[None]]) -> None:
    if backend == "trio":
        trio.run(main)
    else:
        asyncio.run(main())  # type: ignore[arg-type]


BACKENDS = ["trio", "asyncio"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_anthropic_replay(backend: str) -> None:
    async def main() -> None:
        client, transport = replay_client(anthropic_trace(), sync=False)
        assert isinstance(client, anthropic.AsyncAnthropic)
        check_anthropic_message(await call_anthropic(client))
        stream = await call_anthropic(client, stream=True)
        events = [event.to_dict() async for event in stream]
        assert events == stream_payloads(A_STREAM, skip=("ping",))
        assert transport.remaining == []

    run_async(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_openai_chat_replay(backend: str) -> None:
    async def main() -> None:
        client, transport = replay_client(chat_trace(), sync=False)
        assert isinstance(client, openai.AsyncOpenAI)
        check_chat_completion(await call_chat(client))
        stream = await call_chat(client, stream=True)
        chunks = [chunk.to_dict() async for chunk in stream]
        assert chunks == stream_payloads(C_STREAM)
        assert transport.remaining == []

    run_async(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_openai_responses_replay(backend: str) -> None:
    async def main() -> None:
        client, transport = replay_client(responses_trace(), sync=False)
        check_response(await call_responses(client))
        stream = await call_responses(client, stream=True)
        events = [event async for event in stream]
        check_response(events[-1].response)
        assert transport.remaining == []

    run_async(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_mismatch_is_raised_as_replay_mismatch(backend: str) -> None:
    async def main() -> None:
        client, _ = replay_client(anthropic_trace(), sync=False)
        with pytest.raises(ReplayMismatch):
            await call_anthropic(client, system="请简洁。")

    run_async(backend, main)


# Chunking ------------------------------------------------------------------------------------


def test_event_streams_are_served_in_chunks_that_split_characters() -> None:
    trace = anthropic_trace()
    http = httpx2.Client(transport=ReplayTransport(trace))
    http.post("https://x.invalid/v1/messages", json=A_REQUEST).read()
    with http.stream(
        "POST", "https://x.invalid/v1/messages", json={**A_REQUEST, "stream": True}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"] == "req_2"
        chunks = list(response.iter_raw())
    assert b"".join(chunks) == A_STREAM.encode()
    assert len(chunks) > 10
    assert any(not _decodes(chunk) for chunk in chunks)


def _decodes(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# Mismatches ---------------------------------------------------------------------------------


def test_changed_body_raises_with_a_unified_diff() -> None:
    client, transport = replay_client(anthropic_trace())
    with pytest.raises(ReplayMismatch) as info:
        client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=2048,
            messages=[{"role": "user", "content": "上海呢?"}],
            tools=A_REQUEST["tools"],
        )
    message = str(info.value)
    assert message.startswith(
        "request 1 (POST /v1/messages) does not match the recorded POST /v1/messages\n"
    )
    assert "--- recorded\n+++ sent\n" in message
    assert '-  "max_tokens": 1024,' in message
    assert '+  "max_tokens": 2048,' in message
    assert f'-      "content": "{PROMPT}",' in message
    assert '+      "content": "上海呢?",' in message
    assert isinstance(info.value, TurnstileError)
    assert info.value.index == 0
    assert len(transport.remaining) == 2


def test_openai_sdk_also_raises_replay_mismatch() -> None:
    client, _ = replay_client(chat_trace())
    with pytest.raises(ReplayMismatch, match=r'\+  "temperature": 0.2'):
        call_chat(client, temperature=0.2)


def test_extra_request_raises_and_shows_the_body() -> None:
    client, transport = replay_client(anthropic_trace())
    call_anthropic(client)
    list(call_anthropic(client, stream=True))
    with pytest.raises(ReplayMismatch) as info:
        call_anthropic(client)
    message = str(info.value)
    assert "request 3 (POST /v1/messages) is one too many: the trace has 2 exchange(s)" in message
    assert '+  "max_tokens": 1024,' in message
    assert info.value.index == 2
    assert transport.remaining == []


def test_empty_trace_proves_no_request_leaves_the_process() -> None:
    for provider in ("anthropic", "openai-chat", "openai-responses"):
        client, _ = replay_client(Trace(provider=provider, hand_written=True))
        with pytest.raises(ReplayMismatch, match="one too many"):
            client.models.list()


def test_method_and_path_are_checked() -> None:
    trace = chat_trace()
    http = httpx2.Client(transport=ReplayTransport(trace))
    with pytest.raises(
        ReplayMismatch, match=r"\(POST /v1/responses\) does not match the recorded POST /v1/chat"
    ):
        http.post("https://x.invalid/v1/responses", json=C_REQUEST)
    with pytest.raises(ReplayMismatch, match=r"\(PUT /v1/chat/completions\) does not match"):
        http.put("https://x.invalid/v1/chat/completions", json=C_REQUEST)


def test_query_host_and_key_order_are_not_compared() -> None:
    trace = chat_trace()
    http = httpx2.Client(transport=ReplayTransport(trace))
    reordered = json.loads(json.dumps(dict(reversed(list(C_REQUEST.items())))))
    response = http.post(
        "http://elsewhere.invalid/v1/chat/completions?api-version=1", json=reordered
    )
    assert response.json() == C_COMPLETION


def test_json_types_are_compared_exactly() -> None:
    trace = Trace(
        provider="openai-chat",
        hand_written=True,
        exchanges=[exchange("/v1/chat/completions", {"stream": 1}, RecordedResponse(status=200))],
    )
    http = httpx2.Client(transport=ReplayTransport(trace))
    with pytest.raises(ReplayMismatch, match=r'-  "stream": 1\n\+  "stream": true'):
        http.post("https://x.invalid/v1/chat/completions", json={"stream": True})


def test_replay_ignores_credentials_urls_and_proxies_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "ANTHROPIC_API_KEY": "sk-ant-env",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "OPENAI_API_KEY": "sk-env",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "ALL_PROXY": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(name, value)
    a_client, _ = replay_client(anthropic_trace())
    check_anthropic_message(call_anthropic(a_client))
    assert a_client.api_key != "sk-ant-env"
    c_client, _ = replay_client(chat_trace())
    check_chat_completion(call_chat(c_client))
    assert c_client.api_key != "sk-env"


def test_a_recorded_server_error_is_not_retried() -> None:
    trace = Trace(
        provider="anthropic",
        hand_written=True,
        exchanges=[
            exchange(
                "/v1/messages",
                A_REQUEST,
                RecordedResponse(
                    status=500,
                    body={"type": "error", "error": {"type": "api_error", "message": "Internal"}},
                ),
            )
        ],
    )
    client, transport = replay_client(trace)
    with pytest.raises(anthropic.APIStatusError) as info:
        call_anthropic(client)
    assert info.value.status_code == 500
    assert transport.remaining == []


def test_text_body_under_a_non_json_content_type_is_served_raw() -> None:
    html = "<html><body>502 Bad Gateway</body></html>"
    trace = Trace(
        provider="openai-chat",
        hand_written=True,
        exchanges=[
            exchange(
                "/v1/chat/completions",
                C_REQUEST,
                RecordedResponse(status=502, headers={"content-type": "text/html"}, body=html),
            )
        ],
    )
    client, _ = replay_client(trace)
    with pytest.raises(openai.APIStatusError) as info:
        call_chat(client)
    assert (info.value.status_code, info.value.response.text) == (502, html)


# Trace files ---------------------------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    trace = anthropic_trace()
    trace.covers = ["parallel tool calls", "streaming"]
    trace.loop = {"model": "claude-sonnet-4-5", "prompt": PROMPT, "stream": False}
    path = tmp_path / "t.json"
    trace.save(path)
    text = path.read_text(encoding="utf-8")
    assert PROMPT in text
    assert list(json.loads(text)) == [
        "format",
        "provider",
        "hand_written",
        "description",
        "covers",
        "loop",
        "exchanges",
    ]
    assert json.loads(text)["format"] == "turnstile-trace/1"
    assert Trace.load(path) == trace
    client, transport = replay_client(Trace.load(path))
    check_anthropic_message(call_anthropic(client))
    assert len(transport.remaining) == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "malformed"),
        (
            '{"format": "turnstile-trace/2", "provider": "anthropic", "hand_written": true}',
            "format",
        ),
        ('{"provider": "gemini", "hand_written": true}', "provider"),
        ('{"provider": "anthropic"}', "hand_written"),
        ('{"provider": "anthropic", "hand_written": true, "extra": 1}', "extra"),
        (
            '{"provider": "anthropic", "hand_written": true, "exchanges": [{"request":'
            ' {"method": "POST", "path": "/v1/messages"}, "response": {"status": 200,'
            ' "body": {}, "sse": "data: x\\n\\n"}}]}',
            "not both",
        ),
    ],
)
def test_load_rejects_what_is_not_a_trace(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceError, match=reason if reason != "malformed" else "bad.json"):
        Trace.load(path)


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 3000,
        b'{"a":' * 3000,
        b'{"provider": "anthropic", "hand_written": true, "loop": ' + b'{"a":' * 3000,
        b'{"provider": "anthropic", "hand_written": true, "loop": '
        + b"[" * 3000
        + b"]" * 3000
        + b"}",
        b'{"provider": "anthropic", "description": "' + b"x" * 10_000_000 + b'"}',
    ],
)
def test_a_trace_file_nested_thousands_deep_or_huge_and_wrong_is_a_trace_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=r"bad\.json"):
        Trace.load(path)


def test_recording_a_response_nested_thousands_deep_keeps_it_as_text() -> None:
    deep = "[" * 3000 + "]" * 3000
    api = FakeAPI([httpx2.Response(200, headers={"content-type": "application/json"}, text=deep)])
    trace = Trace(provider="anthropic", hand_written=False)
    transport = RecordingTransport(httpx2.MockTransport(api), trace)
    transport.handle_request(httpx2.Request("POST", "https://api.anthropic.com/v1/messages"))
    assert trace.exchanges[0].response.body == deep


# Recording -----------------------------------------------------------------------------------

SECRET_KEY = "sk-secret-0123456789"
SECRET_HEADERS = {
    "set-cookie": "session=secret-cookie",
    "anthropic-organization-id": "org-secret",
    "openai-organization": "org-secret",
    "openai-project": "proj-secret",
    "x-api-key": SECRET_KEY,
}


class SlowStream(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """An event stream that counts how many chunks the caller has pulled so far."""

    def __init__(self, raw: bytes, size: int = 40) -> None:
        self.chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.pulled += 1
            yield chunk

    async def __aiter__(self) -> Any:
        for chunk in self.chunks:
            self.pulled += 1
            yield chunk


class FakeAPI:
    """A stand-in for the provider: answers from a list and remembers the requests' headers."""

    def __init__(self, responses: list[httpx2.Response]) -> None:
        self.responses = responses
        self.request_headers: list[httpx2.Headers] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.request_headers.append(request.headers)
        return self.responses.pop(0)


def recording_anthropic(trace: Trace, api: FakeAPI) -> anthropic.Anthropic:
    transport = RecordingTransport(httpx2.MockTransport(api), trace)
    return anthropic.Anthropic(
        api_key=SECRET_KEY,
        base_url="https://api.anthropic.com",
        default_headers={"cookie": "session=secret-cookie"},
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )


def test_recording_strips_keys_and_account_headers(tmp_path: Path) -> None:
    trace = Trace(provider="anthropic", hand_written=False, description="recorded")
    api = FakeAPI(
        [
            httpx2.Response(
                200,
                headers={**SECRET_HEADERS, "request-id": "req_1", "x-should-retry": "false"},
                json=A_MESSAGE,
            )
        ]
    )
    client = recording_anthropic(trace, api)
    check_anthropic_message(call_anthropic(client))
    assert api.request_headers[0]["authorization"] == f"Bearer {SECRET_KEY}"
    (recorded,) = trace.exchanges
    assert recorded.request == RecordedRequest(method="POST", path="/v1/messages", body=A_REQUEST)
    assert recorded.response.headers == {
        "content-type": "application/json",
        "request-id": "req_1",
        "x-should-retry": "false",
    }
    assert recorded.response.body == A_MESSAGE
    path = tmp_path / "recorded.json"
    trace.save(path)
    text = path.read_text(encoding="utf-8").lower()
    for secret in ("sk-secret", "secret-cookie", "org-secret", "proj-secret", "authorization"):
        assert secret not in text


def test_recording_streams_to_the_caller_and_keeps_the_sse_verbatim() -> None:
    trace = Trace(provider="anthropic", hand_written=False)
    raw = A_STREAM.replace("\n", "\r\n").encode()
    stream = SlowStream(raw)
    api = FakeAPI(
        [
            httpx2.Response(
                200,
                headers={"content-type": "text/event-stream", **SECRET_HEADERS},
                stream=stream,
            )
        ]
    )
    client = recording_anthropic(trace, api)
    events = call_anthropic(client, stream=True)
    first = next(iter(events))
    assert first.type == "message_start"
    assert 0 < stream.pulled < len(stream.chunks)
    rest = list(events)
    assert len(rest) == len(events_json(A_STREAM)) - 2
    (recorded,) = trace.exchanges
    assert recorded.response.sse == raw.decode()
    assert recorded.response.headers == {"content-type": "text/event-stream"}
    assert recorded.request.body == {**A_REQUEST, "stream": True}


def test_a_stream_closed_early_records_what_arrived() -> None:
    trace = Trace(provider="anthropic", hand_written=False)
    stream = SlowStream(A_STREAM.encode())
    api = FakeAPI(
        [httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)]
    )
    client = recording_anthropic(trace, api)
    events = call_anthropic(client, stream=True)
    next(iter(events))
    events.close()
    sse = trace.exchanges[0].response.sse
    assert sse
    assert A_STREAM.startswith(sse)
    assert len(sse) < len(A_STREAM)


def test_recording_decodes_compressed_bodies() -> None:
    trace = Trace(provider="openai-chat", hand_written=False)
    api = FakeAPI(
        [
            httpx2.Response(
                200,
                headers={"content-type": "application/json", "content-encoding": "gzip"},
                content=gzip.compress(json.dumps(C_COMPLETION).encode()),
            ),
            httpx2.Response(
                200,
                headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
                content=gzip.compress(C_STREAM.encode()),
            ),
        ]
    )
    client = openai.OpenAI(
        api_key=SECRET_KEY,
        http_client=httpx2.Client(transport=RecordingTransport(httpx2.MockTransport(api), trace)),
        max_retries=0,
    )
    check_chat_completion(call_chat(client))
    assert [c.to_dict() for c in call_chat(client, stream=True)] == stream_payloads(C_STREAM)
    assert trace.exchanges[0].response.body == C_COMPLETION
    assert trace.exchanges[1].response.sse == C_STREAM
    assert trace.exchanges[1].request.path == "/v1/chat/completions"


def test_recorded_trace_replays_through_a_fresh_client(tmp_path: Path) -> None:
    trace = Trace(provider="openai-responses", hand_written=False)
    api = FakeAPI(
        [
            httpx2.Response(200, headers={"x-request-id": "req_r1"}, json=R_RESPONSE),
            httpx2.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=SlowStream(R_STREAM.encode()),
            ),
        ]
    )
    live = openai.OpenAI(
        api_key=SECRET_KEY,
        http_client=httpx2.Client(transport=RecordingTransport(httpx2.MockTransport(api), trace)),
        max_retries=0,
    )
    check_response(call_responses(live))
    live_events = [e.to_dict() for e in call_responses(live, stream=True)]
    trace.save(tmp_path / "r.json")
    client, transport = replay_client(Trace.load(tmp_path / "r.json"))
    check_response(call_responses(client))
    assert [e.to_dict() for e in call_responses(client, stream=True)] == live_events
    assert transport.remaining == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_recording(backend: str) -> None:
    async def main() -> None:
        trace = Trace(provider="anthropic", hand_written=False)
        stream = SlowStream(A_STREAM.encode())
        api = FakeAPI(
            [
                httpx2.Response(200, json=A_MESSAGE),
                httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream),
            ]
        )
        transport = AsyncRecordingTransport(httpx2.MockTransport(api), trace)
        client = anthropic.AsyncAnthropic(
            api_key=SECRET_KEY, http_client=httpx2.AsyncClient(transport=transport), max_retries=0
        )
        check_anthropic_message(await call_anthropic(client))
        events = await call_anthropic(client, stream=True)
        seen = []
        async for event in events:
            seen.append(event.to_dict())
            if len(seen) == 1:
                assert stream.pulled < len(stream.chunks)
        assert seen == stream_payloads(A_STREAM, skip=("ping",))
        assert trace.exchanges[1].response.sse == A_STREAM
        replayed, replay = replay_client(trace, sync=False)
        assert isinstance(replay, AsyncReplayTransport)
        check_anthropic_message(await call_anthropic(replayed))
        assert len(replay.remaining) == 1

    run_async(backend, main)


def test_recording_keeps_the_wait_a_provider_asked_for() -> None:
    """`retry-after` and `retry-after-ms` identify no one, and a replay must ask for the wait."""
    trace = Trace(provider="anthropic", hand_written=False)
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    waits = {"retry-after": "2", "retry-after-ms": "1500"}
    api = FakeAPI([httpx2.Response(429, headers={**SECRET_HEADERS, **waits}, json=body)])
    client = recording_anthropic(trace, api)
    with pytest.raises(anthropic.APIStatusError) as info:
        call_anthropic(client)
    assert info.value.status_code == 429
    (recorded,) = trace.exchanges
    assert recorded.response.headers == {"content-type": "application/json", **waits}
