"""What the executors add to a real SDK's turn: a run through the official OpenAI SDK over a mock
HTTP transport (no network), each executor against a hand-written loop over the same client,
measured in the same run.

The hand-written loop is what a user would write without turnstile: it sends the conversation
with the provider `Client` (the SDK's `post()` with the codec's body), appends the reply, runs
the tool the model called, appends the result, and goes on until a reply calls no tool. The
executors do the same and more (the loop's checks and guards, its event log, the deadline); the
ratio is their cost per turn. Each row interleaves the two runs, `TURNS` turns each, and takes
medians of CPU µs per turn (the process's time, worker threads included: the run is CPU-bound,
the transport never waits, and the load of other jobs on the machine does not count).
"""

from __future__ import annotations

__all__ = ["rows"]

import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import openai
from turnstile.core import Guards, LoopSpec, ModelRequest, tool
from turnstile.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.executors import ainvoke, aio, invoke, sync
from turnstile.providers import openai_chat

from ._measure import Figure

Row = tuple[str, str, str, str, str]

TURNS = 20
"""Model calls per run: `TURNS - 1` that call the tool once each, then the answer."""
PROMPT = "北京和上海哪个更暖和?"
SPEC = LoopSpec(system="你是一个天气助手。", max_tokens=1024, guards=Guards(max_turns=TURNS + 5))


def _reply(n: int) -> dict[str, Any]:
    """The n-th Chat Completions reply: a call of get_weather (a new city each time, so no
    guard takes it for a loop), or, last, the answer."""
    if n < TURNS - 1:
        arguments = json.dumps({"city": f"城市{n}"}, ensure_ascii=False)
        call = {"id": f"call_{n}", "type": "function"}
        call["function"] = {"name": "get_weather", "arguments": arguments}  # type: ignore[assignment]
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "上海更暖和。"}, "stop"
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100 + n, "completion_tokens": 10, "total_tokens": 110 + n},
    }


class _Server:
    """The mock transport's handler: the replies in order, each already encoded."""

    def __init__(self) -> None:
        self.bodies = [json.dumps(_reply(n)).encode() for n in range(TURNS)]
        self.n = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = self.bodies[self.n]
        self.n += 1
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})


def _client(*, is_async: bool) -> openai_chat.Client:
    options: dict[str, Any] = {"api_key": "bench", "base_url": "https://bench.invalid/v1"}
    transport = httpx2.MockTransport(_Server())
    if is_async:
        sdk: Any = openai.AsyncOpenAI(
            **options, max_retries=0, http_client=httpx2.AsyncClient(transport=transport)
        )
    else:
        sdk = openai.OpenAI(
            **options, max_retries=0, http_client=httpx2.Client(transport=transport)
        )
    return openai_chat.Client(sdk, model="gpt-bench")


@tool
def get_weather(city: str) -> dict[str, int]:
    """查询城市的实时天气"""
    return {"温度": len(city) * 9}


@tool(name="get_weather")
async def aget_weather(city: str) -> dict[str, int]:
    """查询城市的实时天气"""
    return {"温度": len(city) * 9}


def _request(messages: list[Message]) -> ModelRequest:
    return ModelRequest(SPEC.system, messages, (get_weather.spec,), SPEC.max_tokens)


def _hand_sync() -> float:
    client, messages = _client(is_async=False), [UserMessage(PROMPT)]
    start = time.process_time()
    while True:
        reply = client.complete(_request(messages))
        messages.append(AssistantMessage(reply.content))
        calls = [p for p in reply.content if type(p) is ToolCall]
        if not calls:
            break
        results = []
        for call in calls:
            out = invoke(get_weather, call.arguments)
            results.append(ToolResult(call.id, out.content, out.is_error))
        messages.append(ToolResults(results))
    return _per_turn(start)


def _executor_sync() -> float:
    client = _client(is_async=False)
    start = time.process_time()
    run = sync.run(SPEC, PROMPT, model=client, tools=[get_weather])
    return _checked(run, start)


async def _hand_async(threaded: bool) -> float:
    client, messages = _client(is_async=True), [UserMessage(PROMPT)]
    start = time.process_time()
    while True:
        reply = await client.acomplete(_request(messages))
        messages.append(AssistantMessage(reply.content))
        calls = [p for p in reply.content if type(p) is ToolCall]
        if not calls:
            break
        results = []
        for call in calls:
            if threaded:  # what an async app does with a blocking function
                out = await anyio.to_thread.run_sync(invoke, get_weather, call.arguments)
            else:
                out = await ainvoke(aget_weather, call.arguments)
            results.append(ToolResult(call.id, out.content, out.is_error))
        messages.append(ToolResults(results))
    return _per_turn(start)


async def _executor_async(threaded: bool) -> float:
    client = _client(is_async=True)
    start = time.process_time()
    run = await aio.run(
        SPEC, PROMPT, model=client, tools=[get_weather if threaded else aget_weather]
    )
    return _checked(run, start)


def _per_turn(start: float) -> float:
    return (time.process_time() - start) / TURNS * 1e6


def _checked(run: Any, start: float) -> float:
    elapsed = _per_turn(start)
    if run.output != "上海更暖和。" or len(run.messages) != 2 * TURNS:
        raise RuntimeError(f"the bench run did not go as scripted: {run.stop_reason}")
    return elapsed


def _pair(
    hand: Callable[[], float], executor: Callable[[], float], repeats: int
) -> tuple[Figure, Figure, list[float]]:
    """Both, interleaved `repeats` times (a warm-up pair first): their figures, and the per-pair
    ratios, which the machine's load moves less than either alone."""
    hand(), executor()
    hands, runs, ratios = [], [], []
    for _ in range(repeats):
        gc.collect()
        h = hand()
        gc.collect()
        e = executor()
        hands.append(h)
        runs.append(e)
        ratios.append(e / h)
    return Figure.of(hands), Figure.of(runs), ratios


TARGET = 1.1
"""The executor's turn against the hand loop's: at most this in 9 pairs of 10."""


def _under(backend: str, fn: Callable[[], Awaitable[float]]) -> Callable[[], float]:
    return lambda: anyio.run(fn, backend=backend)


def rows(sizes: list[int], times: int) -> list[Row]:
    """(measure, N, figure, baseline and ratio, target verdict) rows; N is the turns of a run,
    and `times` (1 for `--quick`) scales the repeats."""
    del sizes
    repeats = max(10, 5 * times)
    found: list[Row] = []
    cases: list[tuple[str, Callable[[], float], Callable[[], float], str]] = [
        ("sync", _hand_sync, _executor_sync, "(reference)"),
    ]
    for backend in ("asyncio", "trio"):
        cases.append(
            (
                f"aio · {backend}",
                _under(backend, lambda: _hand_async(False)),
                _under(backend, lambda: _executor_async(False)),
                f"≤ {TARGET:g}× in 9 pairs of 10",
            )
        )
    cases.append(
        (
            "aio · asyncio, sync tool in a thread",
            _under("asyncio", lambda: _hand_async(True)),
            _under("asyncio", lambda: _executor_async(True)),
            f"≤ {TARGET:g}× in 9 pairs of 10 (the hand loop threads it too)",
        )
    )
    for name, hand, executor, target in cases:
        hand_f, run_f, ratios = _pair(hand, executor, repeats)
        within = sum(r <= TARGET for r in ratios)
        verdict = target
        if target.startswith("≤"):
            verdict = f"{'pass' if within >= 0.9 * len(ratios) else 'MISS'} ({target})"
        found.append(
            (
                f"OpenAI SDK turn CPU µs · {name}",
                str(TURNS),
                str(run_f),
                f"hand loop {hand_f.median:,.1f} → ×{statistics.median(ratios):.2f}, "
                f"{within}/{len(ratios)} pairs ≤ {TARGET:g}×",
                verdict,
            )
        )
    return found
