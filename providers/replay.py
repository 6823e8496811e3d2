"""Wire traces of whole conversations: read one, record one, and serve it back.

A trace (format: fixtures/README.md) says how its loop was set up (its `loop` section) and holds
every HTTP exchange; `RecordingTransport` fills one from a live `httpx2` client. `spec_for`,
`prompt_for` and `RecordedTools` rebuild the loop's side of it, `client_for` the provider's
`Client` over the official SDK, wired to a replay of the exchanges (`ReplayTransport` over
`offline_sdk`): a request that differs from the recording raises `ReplayMismatch` with a diff of
the two bodies. Driving the whole loop through an executor is
`turnstile.executors.testing.replay`.
"""

from __future__ import annotations

__all__ = [
    "CLIENTS",
    "AsyncRecordingTransport",
    "AsyncReplayTransport",
    "RecordedTools",
    "RecordingTransport",
    "ReplayMismatch",
    "ReplayTransport",
    "Trace",
    "TraceError",
    "client_and_transport",
    "client_for",
    "load_trace",
    "offline_sdk",
    "prompt_for",
    "spec_for",
]

import importlib
import json
from collections import deque
from pathlib import Path
from typing import Any, Literal

import msgspec
from turnstile.core import Guards, LoopSpec, Price, ToolOutcome, ToolSpec, TurnstileError
from turnstile.core.messages import Message, ModelResponse, ResultPart, ToolCall
from turnstile.core.request import CachePolicy, ServerTool

from . import anthropic_messages, openai_chat, openai_responses
from ._client import StreamReader, WireClient
from ._offline import Cloud, offline_sdk
from ._offline import replay_client as _replay_sdk
from ._transport import (
    AsyncRecordingTransport,
    AsyncReplayTransport,
    RecordingTransport,
    ReplayMismatch,
    ReplayTransport,
    Trace,
    TraceError,
)
from .openai_chat import _wire_of as _chat_wire

CLIENTS: dict[str, type[WireClient]] = {  # a trace's `provider` -> the format's `Client`
    "anthropic": anthropic_messages.Client,
    "openai-chat": openai_chat.Client,
    "openai-responses": openai_responses.Client,
}


class _Output(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    content: str | list[ResultPart]
    is_error: bool = False


class _Loop(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A trace's `loop` section, checked. `output` names the answer's type where it lives in
    code ("module:attribute"), since a type is not data."""

    model: str
    prompt: str | list[Message]
    system: str | None = None
    stream: bool = False
    max_tokens: int = 4096
    tools: list[ToolSpec] = []
    tool_outputs: dict[str, _Output] = {}
    options: dict[str, Any] = {}
    guards: dict[str, Any] = {}
    server_tools: list[ServerTool] = []
    cache: CachePolicy = CachePolicy()
    output: str | None = None
    output_mode: Literal["tool", "native"] = "tool"
    models: list[str] = []
    prices: dict[str, Price] = {}
    cloud: Cloud | None = None  # the provider's API on a cloud, through its SDK's own client
    dialect: str | None = None  # an OpenAI-compatible server's rules (openai_chat.DIALECTS)


def load_trace(path: str | Path) -> Trace:
    """Read a trace file. Raises `OSError` when it cannot be read, `TraceError` when it is not a
    trace (bad JSON, a missing field, an unknown provider)."""
    return Trace.load(path)


def _loop(trace: Trace) -> _Loop:
    if trace.loop is None:
        raise TraceError("the trace has no `loop` section: it says nothing of how to replay it")
    try:
        loop = msgspec.convert(trace.loop, _Loop)
    except msgspec.ValidationError as err:
        raise TraceError(f"loop: {err}") from None
    if loop.dialect is not None and (
        trace.provider != "openai-chat" or loop.dialect not in openai_chat.DIALECTS
    ):
        raise TraceError(f"loop.dialect: {loop.dialect!r} is no dialect of {trace.provider}")
    return loop


def prompt_for(trace: Trace) -> str | list[Message]:
    """The prompt the trace's loop started from: text, or messages."""
    return _loop(trace).prompt


def spec_for(trace: Trace) -> LoopSpec:
    """The `LoopSpec` the trace's loop ran with: system prompt, tools, guards and max_tokens."""
    loop = _loop(trace)
    try:
        guards = msgspec.convert(loop.guards, Guards)
    except msgspec.ValidationError as err:
        raise TraceError(f"loop.guards: {err}") from None
    return LoopSpec(
        system=loop.system,
        tools=tuple(loop.tools),
        guards=guards,
        max_tokens=loop.max_tokens,
        server_tools=tuple(loop.server_tools),
        cache=loop.cache,
        output=None if loop.output is None else _imported(loop.output),
        output_mode=loop.output_mode,
        models=tuple(loop.models),
        prices=loop.prices,
    )


def _imported(where: str) -> Any:
    """The object at "module:attribute"."""
    module, _, name = where.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise TraceError(f"loop.output: cannot import {where!r}: {err}") from None


def _key(name: str, arguments: dict[str, Any]) -> str:
    return name + "\0" + json.dumps(arguments, ensure_ascii=False, sort_keys=True)


class RecordedTools:
    """A `ToolRunner` answering each call with its recorded output (`loop.tool_outputs`).

    The outputs are keyed by call id, but a runner is handed only a name and arguments. So the
    recorded replies are decoded once, in order, to learn the call ids each (name, arguments) pair
    had, and each call takes the next id of its pair: repeated identical calls get their outputs
    in recorded order (under trio, identical calls of one reply run at once and may swap them,
    which matters only if their outputs differ). A call the trace has no output for gets an error
    result naming it, and is listed in `unrecorded`.
    """

    def __init__(self, trace: Trace) -> None:
        loop = _loop(trace)
        self.specs = tuple(loop.tools)
        self._outputs = loop.tool_outputs
        self._ids: dict[str, deque[str]] = {}
        for call in _recorded_calls(trace):
            if call.id in self._outputs:
                self._ids.setdefault(_key(call.name, call.arguments), deque()).append(call.id)
        self.unrecorded: list[str] = []

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        key = _key(name, arguments)
        ids = self._ids.get(key)
        if not ids:
            shown = f"{name} {json.dumps(arguments, ensure_ascii=False, sort_keys=True)}"
            self.unrecorded.append(shown)
            return ToolOutcome(f"the trace has no recorded output for {shown}", True)
        output = self._outputs[ids.popleft()]
        return ToolOutcome(output.content, output.is_error)


def _recorded_calls(trace: Trace) -> list[ToolCall]:
    """Every tool call of every reply the trace recorded, in order; failed replies have none."""
    dialect = _loop(trace).dialect
    wire = CLIENTS[trace.provider].wire if dialect is None else _chat_wire(dialect)
    calls: list[ToolCall] = []
    for exchange in trace.exchanges:
        response = exchange.response
        if response.status != 200:
            continue
        try:
            if response.sse is not None:  # read as the client reads it
                reader = StreamReader(wire)
                reader.feed(response.sse.encode())
                reply: ModelResponse = reader.result()
            else:
                reply = wire.decode(response.body)
        except TurnstileError:  # an error reply, a failed stream: no call of it ever ran
            continue
        calls += [p for p in reply.content if type(p) is ToolCall]
    return calls


def client_and_transport(
    trace: Trace, *, sync: bool = True
) -> tuple[WireClient, ReplayTransport | AsyncReplayTransport]:
    """`client_for(trace, sync=sync)` and the replay transport serving it: its `remaining` are
    the exchanges no request has asked for yet."""
    loop = _loop(trace)
    sdk, transport = _replay_sdk(trace, sync=sync)  # type: ignore[call-overload]
    options = loop.options if loop.dialect is None else {**loop.options, "dialect": loop.dialect}
    client = CLIENTS[trace.provider](sdk, model=loop.model, stream=loop.stream, **options)
    return client, transport


def client_for(trace: Trace, *, sync: bool = True) -> WireClient:
    """The provider's `Client` over its official SDK client (sync, or async for `acomplete`),
    wired to a replay of `trace`, with the model, `stream` and options the trace's loop used."""
    return client_and_transport(trace, sync=sync)[0]
