"""Server-side state and resumable streams over the Responses API, through the real SDK client
and a scripted server: with `store=True` a history that continues a stored response sends only
what follows it (decided from the request alone, so runs sharing a client, resumed, forked and
fallen-back runs are each right); a background stream that drops is picked up after its last
event, while the other formats' dropped streams are asked again by the loop, as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import msgspec
import openai
import pytest
from turnstile.core import Guards, LoopSpec, ModelRequest, StopReason, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Message,
    Text,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.executors import sync
from turnstile.providers import ProviderError, anthropic_messages, openai_chat, openai_responses
from turnstile.providers._deltas import Delta, TextDelta
from turnstile.providers._responses_items import STORED, fold

BASE = "https://x.invalid/v1"
WEATHER = ToolSpec("get_weather", "the weather", {"type": "object", "properties": {}})
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": "{}",
    "status": "completed",
}


def said(text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": content}  # fmt: skip


def response(id_: str, *output: dict[str, Any], background: bool = False) -> dict[str, Any]:
    return {"id": id_, "object": "response", "created_at": 0, "status": "completed", "model": "m",
            "output": list(output), "store": True, "background": background}  # fmt: skip


class Server:
    """Serves its replies in order (a dict: a JSON body; else a handler) and keeps requests."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else httpx2.Response(200, json=reply)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.content]


def sdk(server: Server, base: str = BASE, cls: Any = openai.OpenAI) -> Any:
    if cls in (openai.AsyncOpenAI, anthropic.AsyncAnthropic):
        http: Any = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    else:
        http = httpx2.Client(transport=httpx2.MockTransport(server), trust_env=False)
    return cls(api_key="k", base_url=base, http_client=http, max_retries=0)


def client(server: Server, base: str = BASE, **options: Any) -> openai_responses.Client:
    return openai_responses.Client(sdk(server, base), model="m", **options)


def ask(*messages: Message) -> ModelRequest:
    return ModelRequest(None, list(messages), [WEATHER], 64)


def get_weather() -> str:
    """the weather"""
    return "sunny"


# -- server-side state ---------------------------------------------------------------------------


def test_with_store_a_run_sends_only_the_items_after_the_response_it_continues() -> None:
    server = Server(response("resp_1", CALL), response("resp_2", said("Sunny.")))
    spec = LoopSpec(tools=(WEATHER,))
    run = sync.run(spec, "weather?", model=client(server, store=True), tools=[get_weather])
    assert run.stop_reason is StopReason.completed
    first, second = server.bodies
    assert (first["store"], "previous_response_id" in first) == (True, False)
    assert second["previous_response_id"] == "resp_1"
    assert second["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    ]


def test_without_store_every_request_sends_the_whole_history_unmarked() -> None:
    server = Server(response("resp_1", CALL), response("resp_2", said("Sunny.")))
    spec = LoopSpec(tools=(WEATHER,))
    run = sync.run(spec, "weather?", model=client(server), tools=[get_weather])
    second = server.bodies[1]
    assert "previous_response_id" not in second and len(second["input"]) == 3
    assert STORED not in json.dumps(msgspec.to_builtins(run.messages))


def test_runs_sharing_a_client_each_continue_their_own_response() -> None:
    server = Server(*(response(f"resp_{n}", said(n)) for n in ("a", "b", "b2", "a2")))
    shared = client(server, store=True)
    a = [UserMessage("a")]
    b = [UserMessage("b")]
    a.append(AssistantMessage(shared.complete(ask(*a)).content))
    b.append(AssistantMessage(shared.complete(ask(*b)).content))
    for history in (b, a):  # interleaved, in the other order
        history.append(UserMessage("again"))
        shared.complete(ask(*history))
    sent = [(body.get("previous_response_id"), body["input"]) for body in server.bodies[2:]]
    again = [{"type": "message", "role": "user", "content": "again"}]
    assert sent == [("resp_b", again), ("resp_a", again)]


def stored_history(base: str = BASE) -> list[Message]:
    """A user message and a reply a store=True client at `base` marked as stored."""
    server = Server(response("resp_1", said("Hello.")))
    reply = client(server, base, store=True).complete(ask(UserMessage("hi")))
    return [UserMessage("hi"), AssistantMessage(reply.content)]


def sent_after(history: list[Message], base: str = BASE, model: str = "m") -> dict[str, Any]:
    """The body a store=True client at `base` asking `model` sends for `history`."""
    server = Server(response("resp_2", said("Bye.")))
    client(server, base, store=True).complete(msgspec.structs.replace(ask(*history), model=model))
    return server.bodies[0]


def test_a_resumed_run_continues_the_response_its_history_names() -> None:
    """A history dumped and loaded in another process (another client, same server)."""
    history = msgspec.json.decode(msgspec.json.encode(stored_history()), type=list[Message])
    body = sent_after([*history, UserMessage("more")])
    assert body["previous_response_id"] == "resp_1"
    assert body["input"] == [{"type": "message", "role": "user", "content": "more"}]


@pytest.mark.parametrize(
    "change",
    [
        lambda h: [UserMessage("changed"), *h[1:]],  # an earlier message changed
        lambda h: [UserMessage("inserted"), *h],  # a message inserted before the reply
        lambda h: h[1:],  # cut before the reply
        lambda h: [*h, AssistantMessage([Text("another model's answer")])],  # a fallback
    ],
    ids=["changed", "inserted", "cut", "fallback"],
)
def test_a_history_that_no_longer_ends_where_the_server_s_does_is_sent_whole(
    change: Callable[[list[Message]], list[Message]],
) -> None:
    history = [*change(stored_history()), UserMessage("more")]
    body = sent_after(history)
    assert "previous_response_id" not in body
    assert len(body["input"]) == len(fold_of(history))


def fold_of(history: list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    fold(items, history)
    return items


def test_a_history_another_server_stored_is_sent_whole() -> None:
    history = [*stored_history("https://elsewhere.invalid/v1"), UserMessage("more")]
    assert "previous_response_id" not in sent_after(history)


def test_a_history_another_model_answered_last_is_sent_whole() -> None:
    """A fallback (`LoopSpec.models`) asks the same server another model."""
    history = [*stored_history(), UserMessage("more")]
    body = sent_after(history, model="fallback-model")
    assert ("previous_response_id" in body, body["model"]) == (False, "fallback-model")


def test_a_fork_after_a_stored_reply_continues_it_with_its_own_new_items() -> None:
    parent = [*stored_history(), UserMessage("more"), AssistantMessage([Text("More.")])]
    fork = [*parent[:2], UserMessage("instead")]  # cut after the stored reply, then changed
    body = sent_after(fork)
    assert body["previous_response_id"] == "resp_1"
    assert body["input"] == [{"type": "message", "role": "user", "content": "instead"}]


def test_the_stored_mark_never_goes_on_the_wire() -> None:
    server = Server(response("resp_1", said("Looking."), CALL))
    reply = client(server, store=True).complete(ask(UserMessage("hi")))
    assert STORED in reply.content[-1].provider_data  # type: ignore[union-attr]
    plain = openai_responses.decode(response("resp_1", said("Looking."), CALL))
    assert fold_of([AssistantMessage(reply.content)]) == fold_of([AssistantMessage(plain.content)])
    results = ToolResults([ToolResult("call_1", "sunny")])
    history = [UserMessage("hi"), AssistantMessage(reply.content), results]
    body = openai_responses.encode(ask(*history), model="m")  # store off: the whole history
    assert STORED not in json.dumps(body)


# -- resumable streams ---------------------------------------------------------------------------


def events(id_: str, text: str, *, background: bool = True) -> list[dict[str, Any]]:
    """A streamed reply of `text` in two-character deltas, numbered from 0."""
    begun = {**response(id_, background=background), "status": "in_progress"}
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": begun},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**said(""), "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}},
    ]  # fmt: skip
    out += [
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
         "content_index": 0, "delta": text[i : i + 2]}
        for i in range(0, len(text), 2)
    ]  # fmt: skip
    done = response(id_, said(text), background=background)
    out.append({"type": "response.completed", "response": done})
    return [{**event, "sequence_number": n} for n, event in enumerate(out)]


def encoded(payloads: list[dict[str, Any]]) -> bytes:
    return b"".join(
        f"event: {p.get('type', 'message')}\ndata: {json.dumps(p)}\n\n".encode() for p in payloads
    )


class Cut(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """An event stream whose connection drops after `data` (when `drop`; else it just ends)."""

    def __init__(self, data: bytes, drop: bool = True) -> None:
        self.data, self.drop = data, drop

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        if self.drop:
            raise httpx2.ReadError("the connection dropped")

    async def __aiter__(self) -> Any:
        yield self.data
        if self.drop:
            raise httpx2.ReadError("the connection dropped")


def streamed(data: bytes, drop: bool = False) -> Callable[[httpx2.Request], httpx2.Response]:
    stream = Cut(data, drop)
    headers = {"content-type": "text/event-stream"}
    return lambda request: httpx2.Response(200, headers=headers, stream=stream)


TEXT = "The weather in Paris is sunny."
STREAM = events("resp_9", TEXT)


@pytest.mark.parametrize("drop", [True, False], ids=["connection dropped", "ended early"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_dropped_background_stream_continues_after_its_last_event(
    drop: bool, is_async: bool
) -> None:
    server = Server(streamed(encoded(STREAM[:6]), drop), streamed(encoded(STREAM[6:])))
    shown: list[Delta] = []
    options = {"stream": True, "on_delta": shown.append, "store": True, "background": True}
    cls = openai.AsyncOpenAI if is_async else openai.OpenAI
    responses = openai_responses.Client(sdk(server, cls=cls), model="m", **options)
    request = ask(UserMessage("weather?"))
    if is_async:
        reply = asyncio.run(responses.acomplete(request))
    else:
        reply = responses.complete(request)
    assert reply.content[0] == Text(TEXT, provider_data=reply.content[0].provider_data)  # type: ignore[union-attr]
    assert "".join(d.text for d in shown if type(d) is TextDelta) == TEXT  # shown once
    _, get = server.requests
    assert (get.method, get.url.path) == ("GET", "/v1/responses/resp_9")
    assert dict(get.url.params) == {"stream": "true", "starting_after": "5"}


def test_background_mode_without_a_stream_is_refused() -> None:
    """Without a stream, a background reply is only queued: this client does not poll it."""
    with pytest.raises(ValueError, match="background=True needs stream=True"):
        client(Server(), store=True, background=True)


def test_a_dropped_stream_not_in_background_fails_for_the_loop_to_ask_again() -> None:
    plain = events("resp_9", TEXT, background=False)
    server = Server(streamed(encoded(plain[:6]), drop=True))
    responses = client(server, stream=True)
    with pytest.raises(ProviderError) as info:
        responses.complete(ask(UserMessage("weather?")))
    assert (info.value.kind, info.value.retryable) == ("connection_error", True)
    assert len(server.requests) == 1


def test_resuming_a_stream_gives_up_after_three_more_drops() -> None:
    cut = [streamed(encoded(STREAM[:6]), drop=True)]
    server = Server(*cut, *(streamed(b"", drop=True) for _ in range(3)))
    responses = client(server, stream=True, store=True, background=True)
    with pytest.raises(ProviderError) as info:
        responses.complete(ask(UserMessage("weather?")))
    assert info.value.kind == "connection_error"
    assert [r.method for r in server.requests] == ["POST", "GET", "GET", "GET"]


CHAT = [
    {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT},
                  "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]  # fmt: skip
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
           "stop_reason": None, "usage": {"input_tokens": 1, "output_tokens": 0}}  # fmt: skip
ANTHROPIC = [
    {"type": "message_start", "message": MESSAGE},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
     "usage": {"output_tokens": 7}},
    {"type": "message_stop"},
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "stream", "done"),
    [
        (lambda s: openai_chat.Client(sdk(s), model="m", stream=True), CHAT, b"data: [DONE]\n\n"),
        (
            lambda s: anthropic_messages.Client(sdk(s, cls=anthropic.Anthropic), stream=True),
            ANTHROPIC,
            b"",
        ),
    ],
    ids=["openai-chat", "anthropic"],
)
def test_other_formats_ask_again_after_a_dropped_stream(
    make: Callable[[Server], Any], stream: list[dict[str, Any]], done: bytes
) -> None:
    whole = encoded(stream) + done
    server = Server(streamed(whole[:40], drop=True), streamed(whole))
    now = [0.0]
    run = sync.run(
        LoopSpec(guards=Guards(max_model_retries=1)),
        "weather?",
        model=make(server),
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
    )
    assert (run.stop_reason, run.finish.output if run.finish else None) == (
        StopReason.completed,
        TEXT,
    )
    assert [r.method for r in server.requests] == ["POST", "POST"]
