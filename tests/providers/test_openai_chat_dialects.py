"""Dialects of OpenAI-compatible servers: reasoning read as `Thinking` and sent back as each
server wants it, and the shapes such servers send in place of OpenAI's own."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import openai
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from turnstile.core import ModelRequest
from turnstile.core.messages import (
    AssistantMessage,
    History,
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
from turnstile.core.request import CachePolicy
from turnstile.executors.testing import replay
from turnstile.providers import WireCache, openai_chat
from turnstile.providers._deltas import ArgumentsDelta, TextDelta, ThinkingDelta
from turnstile.providers._errors import DecodeError, ProviderError
from turnstile.providers._sse import events_json
from turnstile.providers.replay import TraceError, load_trace, spec_for

from tests.steps import call_ids

DIALECTS = sorted(openai_chat.DIALECTS)


def body(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return {"id": "chatcmpl-7", "object": "chat.completion", "choices": [choice], **extra}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "chatcmpl-7", "object": "chat.completion.chunk", "choices": choices, **extra}


def streamed(chunks: list[dict[str, Any]], dialect: str | None) -> tuple[list[Any], Any]:
    acc = openai_chat.StreamAccumulator(None if dialect is None else openai_chat.DIALECTS[dialect])
    deltas = [d for c in chunks for d in acc.feed(c)]
    return deltas, acc.result()


def thinking(text: str, field: str = "reasoning_content") -> Thinking:
    return Thinking(text, provider_data={"openai_chat": {"field": field}})


WEATHER = {"id": "call_1", "type": "function", "function": {"name": "get_weather"}}


def call(arguments: Any, **fields: Any) -> dict[str, Any]:
    return {**WEATHER, **fields, "function": {"name": "get_weather", "arguments": arguments}}


# -- reading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_dialect_reads_either_reasoning_field_as_thinking_first(dialect: str, field: str) -> None:
    reply = openai_chat.decode(
        body({field: "想一想", "content": "晴"}), openai_chat.DIALECTS[dialect]
    )
    assert reply.content == [thinking("想一想", field), Text("晴")]


def test_without_a_dialect_reasoning_content_stays_verbatim_in_an_opaque() -> None:
    reply = openai_chat.decode(body({"reasoning_content": "想一想", "content": "晴"}))
    assert reply.content == [Text("晴"), Opaque("openai_chat", {"reasoning_content": "想一想"})]


def test_a_second_reasoning_field_that_repeats_the_first_is_dropped_one_that_differs_kept() -> None:
    vllm = openai_chat.DIALECTS["vllm"]
    same = openai_chat.decode(body({"reasoning_content": "a", "reasoning": "a"}), vllm)
    assert same.content == [thinking("a")]
    other = openai_chat.decode(body({"reasoning_content": "a", "reasoning": "b"}), vllm)
    assert other.content == [thinking("a"), Opaque("openai_chat", {"reasoning": "b"})]


def test_a_streamed_reasoning_is_thinking_deltas_and_equals_the_body() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "", "reasoning": "想"}),
        chunk({"reasoning": "一想"}),
        chunk({"content": "晴"}),
        chunk({}, "stop"),
    ]
    deltas, reply = streamed(chunks, "ollama")
    assert deltas == [ThinkingDelta(0, "想"), ThinkingDelta(0, "一想"), TextDelta(1, "晴")]
    whole = openai_chat.decode(
        body({"reasoning": "想一想", "content": "晴"}), openai_chat.DIALECTS["ollama"]
    )
    assert reply == whole


def test_a_body_without_finish_reason_is_judged_by_its_content_under_a_dialect() -> None:
    vllm = openai_chat.DIALECTS["vllm"]
    assert openai_chat.decode(body({"content": "晴"}, None), vllm).stop is ModelStop.end_turn
    calls = body({"tool_calls": [call('{"city":"北京"}')]}, None)
    assert openai_chat.decode(calls, vllm).stop is ModelStop.tool_use
    with pytest.raises(DecodeError, match="finish_reason"):
        openai_chat.decode(body({"tool_calls": [call('{"city":')]}, None), vllm)
    with pytest.raises(DecodeError, match="finish_reason"):
        openai_chat.decode(body({"content": "晴"}, None))


def test_a_call_without_id_gets_one_from_the_reply_id_where_the_dialect_allows() -> None:
    calls = body({"tool_calls": [call("{}", id=None), call("{}", id="")]}, "tool_calls")
    reply = openai_chat.decode(calls, openai_chat.DIALECTS["ollama"])
    assert [p.id for p in reply.content if type(p) is ToolCall] == [
        "call_0_chatcmpl-7",
        "call_1_chatcmpl-7",
    ]
    for dialect in (None, openai_chat.DIALECTS["deepseek"]):
        with pytest.raises(DecodeError, match=r"tool_calls\[0\]\.id"):
            openai_chat.decode(calls, dialect)
    no_reply_id = {k: v for k, v in calls.items() if k != "id"}
    with pytest.raises(DecodeError, match=r"tool_calls\[0\]\.id"):
        openai_chat.decode(no_reply_id, openai_chat.DIALECTS["ollama"])


def test_arguments_sent_as_an_object_are_read_under_a_dialect() -> None:
    reply = openai_chat.decode(
        body({"tool_calls": [call({"city": "北京"})]}, "tool_calls"), openai_chat.DIALECTS["vllm"]
    )
    assert reply.content == [ToolCall("call_1", "get_weather", {"city": "北京"})]
    with pytest.raises(DecodeError, match="arguments"):
        openai_chat.decode(body({"tool_calls": [call({"city": "北京"})]}, "tool_calls"))


def test_stream_fragments_without_index_or_id_and_with_object_arguments() -> None:
    """Calls sent whole, each in a chunk, with no index, no id and arguments as objects (as
    some local servers send them); fragments without a name continue the last call."""
    first = {"function": {"name": "get_weather", "arguments": {"city": "北京"}}}
    second = {"function": {"name": "get_weather", "arguments": '{"city":'}}
    chunks = [
        chunk({"role": "assistant", "tool_calls": [first]}),
        chunk({"tool_calls": [second]}),
        chunk({"tool_calls": [{"function": {"arguments": '"上海"}'}}]}),
        chunk({}, None, usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
    ]
    deltas, reply = streamed(chunks, "lmstudio")
    assert reply.content == [
        ToolCall("call_0_chatcmpl-7", "get_weather", {"city": "北京"}),
        ToolCall("call_1_chatcmpl-7", "get_weather", {"city": "上海"}),
    ]
    assert reply.stop is ModelStop.tool_use and reply.usage == Usage(9, 4)
    assert deltas[0] == ArgumentsDelta(0, "call_0_chatcmpl-7", "get_weather", '{"city":"北京"}')
    with pytest.raises(DecodeError, match="index"):
        streamed(chunks, None)


def test_usage_absent_is_zero_and_usage_in_the_last_chunk_alone_counts() -> None:
    said = [chunk({"content": "晴"}), chunk({}, "stop")]
    assert streamed(said, "ollama")[1].usage == Usage()
    last = chunk(None, usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6})
    assert streamed([*said, last], "ollama")[1].usage == Usage(5, 1)


def test_a_reasoning_only_stream_without_finish_reason_ends_the_turn() -> None:
    _, reply = streamed([chunk({"reasoning_content": "嗯"})], "deepseek")
    assert reply.content == [thinking("嗯")] and reply.stop is ModelStop.end_turn
    with pytest.raises(ProviderError, match="finish_reason"):
        streamed([chunk({"reasoning_content": "嗯"})], None)


@settings(max_examples=60, deadline=None)
@given(
    reasoning=st.text(max_size=6),
    text=st.text(max_size=6),
    arguments=st.lists(st.sampled_from(['{"city":"北京"}', "", "{}"]), max_size=2),
    cuts=st.lists(st.integers(0, 6), min_size=1, max_size=1),
    dialect=st.sampled_from(DIALECTS),
)
def test_a_dialect_s_stream_split_anywhere_equals_its_body(
    reasoning: str, text: str, arguments: list[str], cuts: list[int], dialect: str
) -> None:
    fields = openai_chat.DIALECTS[dialect].reads[0]
    calls = [call(a, id=f"call_{n}") for n, a in enumerate(arguments)]
    message = {fields: reasoning, "content": text, "tool_calls": calls}
    finish = "tool_calls" if calls else "stop"
    pieces = [chunk({fields: reasoning[i : i + 2]}) for i in range(0, len(reasoning), 2)]
    cut = cuts[0]
    pieces += [chunk({"content": text[:cut]}), chunk({"content": text[cut:]})]
    pieces += [chunk({"tool_calls": [{**c, "index": n}]}) for n, c in enumerate(calls)]
    pieces.append(chunk({}, finish))
    _, reply = streamed(pieces, dialect)
    whole = openai_chat.decode(body(message, finish), openai_chat.DIALECTS[dialect])
    assert reply == whole


# -- sending ---------------------------------------------------------------------------------------

ASKED = UserMessage("北京天气?")
CALLED = AssistantMessage([thinking("查一下"), ToolCall("call_1", "get_weather", {"city": "北京"})])
ANSWERED = ToolResults([ToolResult("call_1", "晴")])
FINAL = AssistantMessage([thinking("晴天"), Text("北京晴")])
AGAIN = UserMessage("谢谢")
CHAT = AssistantMessage([thinking("客气"), Text("不客气")])
OTHERS = AssistantMessage(
    [Thinking("signed", signature="sig"), ToolCall("call_2", "get_weather", {"city": "上海"})]
)


def assistants(dialect: str | None, messages: Any, cache: WireCache | None = None) -> list:
    request = ModelRequest(None, messages, [], 256)
    wire = openai_chat.encode(
        request,
        model="m",
        cache=cache,
        dialect=None if dialect is None else openai_chat.DIALECTS[dialect],
    )
    return [
        {k: v for k, v in m.items() if k.startswith("reasoning")}
        for m in wire["messages"]
        if m["role"] == "assistant"
    ]


@pytest.mark.parametrize(
    ("dialect", "sent"),
    [
        (None, [{}, {}, {}]),
        ("openrouter", [{}, {}, {}]),
        ("lmstudio", [{}, {}, {}]),
        ("vllm", [{"reasoning": "查一下"}, {"reasoning": "晴天"}, {"reasoning": "客气"}]),
        ("ollama", [{"reasoning": "查一下"}, {"reasoning": "晴天"}, {"reasoning": "客气"}]),
        ("deepseek", [{"reasoning_content": "查一下"}, {"reasoning_content": "晴天"}, {}]),
    ],
)
def test_reasoning_goes_back_as_each_server_wants_it(
    dialect: str | None, sent: list[dict[str, str]]
) -> None:
    """DeepSeek wants it in a user turn that called tools, and ignores it elsewhere (its
    thinking-mode guide); vLLM and Ollama read `reasoning`; OpenAI, OpenRouter (whose
    reasoning_details go back verbatim) and LM Studio none."""
    ledger = [ASKED, CALLED, ANSWERED, FINAL, AGAIN, CHAT]
    assert assistants(dialect, ledger) == sent
    cache = WireCache()
    for n in range(1, len(ledger)):  # encoded a message at a time, as a loop does
        assistants(dialect, History(ledger, n), cache=cache)
    assert assistants(dialect, History(ledger), cache=cache) == sent


def test_deepseek_gets_an_empty_reasoning_for_a_tool_turn_another_provider_answered() -> None:
    assert assistants("deepseek", [ASKED, OTHERS]) == [{"reasoning_content": ""}]


def test_a_dialect_writes_max_tokens_and_no_prompt_cache_key() -> None:
    request = ModelRequest(None, [ASKED], [], 256, cache=CachePolicy(), cache_key="k")
    assert "prompt_cache_key" in openai_chat.encode(request, model="m")
    client = openai_chat.Client(openai.OpenAI(api_key="x"), model="m", dialect="deepseek")
    sent = client.wire.encode(request, model="m", **client.options)
    assert sent["max_tokens"] == 256 and "prompt_cache_key" not in sent
    own = openai_chat.Client(
        openai.OpenAI(api_key="x"), dialect="vllm", token_limit_field="max_completion_tokens"
    )
    assert "token_limit_field" not in own.options


def test_a_client_takes_a_dialect_by_name_or_of_your_own() -> None:
    sdk = openai.OpenAI(api_key="x")
    assert openai_chat.Client(sdk).dialect is None
    assert openai_chat.Client(sdk).wire is openai_chat.Client.wire
    mine = openai_chat.Dialect("mine", reads=("thoughts",), sends="thoughts")
    client = openai_chat.Client(sdk, dialect=mine)
    assert client.dialect is mine and client.wire is not openai_chat.Client.wire
    assert client.wire.decode(body({"thoughts": "t"})).content == [thinking("t", "thoughts")]
    with pytest.raises(ValueError, match="unknown dialect 'nope'"):
        openai_chat.Client(sdk, dialect="nope")


# -- the servers' traces -------------------------------------------------------------------------

COMPAT = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "compat"
TRACES = sorted(p.name for p in COMPAT.glob("*.json"))
SENDS_BACK = {"deepseek": "reasoning_content", "vllm": "reasoning", "ollama": "reasoning"}


def test_there_is_a_trace_of_every_dialect() -> None:
    dialects = {json.loads((COMPAT / n).read_text())["loop"]["dialect"] for n in TRACES}
    assert dialects == set(openai_chat.DIALECTS)


# Where a trace leaves the SDK's types on purpose: calls without index, arguments as objects.
BARE = "choices.0.delta.tool_calls.0"
OFF_SDK_TYPES = {
    "ollama_bare_calls.stream.json": {
        (f"{BARE}.index", "missing"),
        (f"{BARE}.function.arguments", "string_type"),
    }
}


def sdk_errors(model: type[pydantic.BaseModel], data: dict[str, Any]) -> set[tuple[str, str]]:
    try:
        model.model_validate(data)
    except pydantic.ValidationError as e:
        return {(".".join(map(str, err["loc"])), err["type"]) for err in e.errors()}
    return set()


@pytest.mark.parametrize("name", TRACES)
def test_a_server_s_responses_validate_against_the_sdk_s_types(name: str) -> None:
    trace = json.loads((COMPAT / name).read_text(encoding="utf-8"))
    assert trace["hand_written"] and trace["description"] and trace["covers"]
    assert name.endswith(".stream.json") == trace["loop"]["stream"]
    for exchange in trace["exchanges"]:
        response = exchange["response"]
        if response["status"] != 200:  # a server's error, in the OpenAI error object's shape
            assert sdk_errors(openai.types.ErrorObject, response["body"]["error"]) == set()
            continue
        if "body" in response:
            assert sdk_errors(ChatCompletion, response["body"]) == set()
            continue
        for c in events_json(response["sse"]):
            expected = OFF_SDK_TYPES.get(name, set()) if "tool_calls" in str(c) else set()
            assert sdk_errors(ChatCompletionChunk, c) == expected


def test_calls_without_ids_get_the_same_made_ids_on_every_replay() -> None:
    runs = [replay(COMPAT / "ollama_bare_calls.stream.json", executor=e) for e in ("sync", "trio")]
    ids = [call_ids(r.messages) for r in runs]
    assert ids == [["call_0_chatcmpl-305", "call_1_chatcmpl-305"]] * 2
    assert runs[0].messages == runs[1].messages


@pytest.mark.parametrize("name", TRACES)
def test_a_server_s_reasoning_is_thinking_and_goes_back_as_its_dialect_says(name: str) -> None:
    """Replayed through the real SDK client: each request equal to the recorded one, whose
    assistant message carries the reasoning back in the dialect's field, or none."""
    run = replay(COMPAT / name)
    validate_history(run.messages)
    replies = [m for m in run.messages if type(m) is AssistantMessage]
    assert type(replies[0].content[0]) is Thinking
    trace = load_trace(COMPAT / name)
    dialect = (trace.loop or {})["dialect"]
    last = trace.exchanges[-1].request.body["messages"]
    [called] = [m for m in last if m["role"] == "assistant"]
    fields = {k for k in called if k.startswith("reasoning")}
    field = SENDS_BACK.get(dialect)
    assert fields == (
        {field} if field else {"reasoning_details"} if dialect == "openrouter" else set()
    )
    if field:
        assert called[field] == replies[0].content[0].text


@pytest.mark.parametrize(("provider", "dialect"), [("openai-chat", "nope"), ("anthropic", "vllm")])
def test_a_trace_naming_no_dialect_of_its_provider_is_refused(provider: str, dialect: str) -> None:
    trace = load_trace(COMPAT / "ollama_weather.json")
    assert trace.loop is not None
    trace.provider, trace.loop["dialect"] = provider, dialect  # type: ignore[assignment]
    with pytest.raises(TraceError, match=r"loop\.dialect"):
        spec_for(trace)
