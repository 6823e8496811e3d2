"""Wire traces of whole conversations: record one, and replay it through the real loop, executor
and SDK client.

A trace (format: fixtures/README.md) says how its loop was set up (its `loop` section) and holds
every HTTP exchange; `RecordingTransport` fills one from a live `httpx2` client. `replay` rebuilds
the loop, answers the tool calls with the recorded outputs and serves the recorded responses to
the provider's `Client` over the official SDK. A request that differs from the recording raises
`ReplayMismatch` with a diff of the two bodies, and so does a run that ends with exchanges left.
"""

from __future__ import annotations

__all__ = [
    "CLIENTS",
    "AsyncRecordingTransport",
    "RecordedTools",
    "RecordingTransport",
    "ReplayMismatch",
    "Trace",
    "TraceError",
    "client_for",
    "load_trace",
    "replay",
    "spec_for",
]

import functools
import json
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec
import trio
from turnstile.core import (
    Command,
    Guards,
    LoopSpec,
    ModelRequest,
    ModelResponse,
    Observation,
    ToolCall,
    ToolOutcome,
    ToolSpec,
    TurnstileError,
)
from turnstile.executors import Run, ToolRunner
from turnstile.executors import sync as sync_executor
from turnstile.executors import trio as trio_executor

from . import anthropic_messages, openai_chat, openai_responses
from ._client import WireClient
from ._sse import events_json
from ._transport import (
    AsyncRecordingTransport,
    AsyncReplayTransport,
    RecordingTransport,
    ReplayMismatch,
    ReplayTransport,
    Trace,
    TraceError,
)
from ._transport import replay_client as _replay_sdk

CLIENTS: dict[str, type[WireClient]] = {  # a trace's `provider` -> the format's `Client`
    "anthropic": anthropic_messages.Client,
    "openai-chat": openai_chat.Client,
    "openai-responses": openai_responses.Client,
}


class _Output(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    content: str
    is_error: bool = False


class _Loop(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A trace's `loop` section, checked."""

    model: str
    prompt: str
    system: str | None = None
    stream: bool = False
    max_tokens: int = 4096
    tools: list[ToolSpec] = []
    tool_outputs: dict[str, _Output] = {}
    options: dict[str, Any] = {}
    guards: dict[str, Any] = {}


def load_trace(path: str | Path) -> Trace:
    """Read a trace file. Raises `OSError` when it cannot be read, `TraceError` when it is not a
    trace (bad JSON, a missing field, an unknown provider)."""
    return Trace.load(path)


def _loop(trace: Trace) -> _Loop:
    if trace.loop is None:
        raise TraceError("the trace has no `loop` section: it says nothing of how to replay it")
    try:
        return msgspec.convert(trace.loop, _Loop)
    except msgspec.ValidationError as err:
        raise TraceError(f"loop: {err}") from None


def spec_for(trace: Trace) -> LoopSpec:
    """The `LoopSpec` the trace's loop ran with: system prompt, tools, guards and max_tokens."""
    loop = _loop(trace)
    try:
        guards = msgspec.convert(loop.guards, Guards)
    except msgspec.ValidationError as err:
        raise TraceError(f"loop.guards: {err}") from None
    return LoopSpec(
        system=loop.system, tools=tuple(loop.tools), guards=guards, max_tokens=loop.max_tokens
    )


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
    wire = CLIENTS[trace.provider].wire
    calls: list[ToolCall] = []
    for exchange in trace.exchanges:
        response = exchange.response
        if response.status != 200:
            continue
        try:
            if response.sse is not None:
                accumulator = wire.accumulator()
                for event in events_json(response.sse):
                    accumulator.feed(event)
                reply: ModelResponse = accumulator.result()
            else:
                reply = wire.decode(response.body)
        except TurnstileError:  # an error reply, a failed stream: no call of it ever ran
            continue
        calls += [p for p in reply.content if type(p) is ToolCall]
    return calls


def _wired(
    trace: Trace, *, sync: bool
) -> tuple[WireClient, ReplayTransport | AsyncReplayTransport]:
    loop = _loop(trace)
    sdk, transport = _replay_sdk(trace, sync=sync)  # type: ignore[call-overload]
    client = CLIENTS[trace.provider](sdk, model=loop.model, stream=loop.stream, **loop.options)
    return client, transport


def client_for(trace: Trace, *, sync: bool = True) -> WireClient:
    """The provider's `Client` over its official SDK client (sync, or async for `acomplete`),
    wired to a replay of `trace`, with the model, `stream` and options the trace's loop used."""
    return _wired(trace, sync=sync)[0]


class _Watched:
    """Passes calls on to the client, keeping a `ReplayMismatch` that the executor would
    otherwise turn into an ordinary failed model call."""

    def __init__(self, client: WireClient) -> None:
        self._client = client
        self.mismatch: ReplayMismatch | None = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return self._client.complete(request)
        except ReplayMismatch as err:
            self.mismatch = self.mismatch or err
            raise

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await self._client.acomplete(request)
        except ReplayMismatch as err:
            self.mismatch = self.mismatch or err
            raise


def replay(
    trace: Trace | str | Path,
    *,
    executor: Literal["sync", "trio"] = "sync",
    tools: ToolRunner | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
) -> Run:
    """Run the trace's loop with its recorded model replies and tool outputs; return the `Run`.

    `executor="trio"` drives it with `turnstile.executors.trio` (inside its own `trio.run`) over
    the async SDK client. `tools` runs the calls instead of the recorded outputs (real tools, a
    sandbox): they must produce those outputs, or the next request will not match. `on_step`
    sees every command and observation, as in the executors.

    Raises:
        ReplayMismatch: a request differed from the recording (the message holds the diff), a
            tool call had no recorded output, or the run ended with exchanges unused.
        TraceError: `trace` is not a replayable trace.
    """
    if executor not in ("sync", "trio"):
        raise ValueError(f"unknown executor {executor!r}: use 'sync' or 'trio'")
    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    loop = _loop(trace)
    spec = spec_for(trace)
    recorded = RecordedTools(trace)
    tools = recorded if tools is None else tools
    client, transport = _wired(trace, sync=executor == "sync")
    model = _Watched(client)
    if executor == "sync":
        run = sync_executor.run(spec, loop.prompt, model=model, tools=tools, on_step=on_step)
    else:
        drive = functools.partial(
            trio_executor.run, spec, loop.prompt, model=model, tools=tools, on_step=on_step
        )
        run = trio.run(drive)
    if model.mismatch is not None:
        raise model.mismatch
    served = len(trace.exchanges) - len(transport.remaining)
    if recorded.unrecorded:
        calls = "; ".join(recorded.unrecorded)
        raise ReplayMismatch(served, f"the trace has no recorded output for: {calls}")
    if transport.remaining:
        nxt = transport.remaining[0].request
        raise ReplayMismatch(
            served,
            f"the run ended ({run.stop_reason.value}) after {served} of {len(trace.exchanges)} "
            f"exchanges; the next was {nxt.method} {nxt.path}",
        )
    return run
