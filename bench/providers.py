"""The provider codecs' costs: encoding the next body as a loop goes on, and folding long streams.

Encoding is timed the way a client meets it: the history grows by one reply and its results per
turn, and each call encodes the whole request again through the client's `WireCache`; the
baseline is the same request re-encoded whole (a plain list of messages, which is not cached).
Streams are built from the recorded fixtures' events, stretched to a long text and long tool
arguments in many deltas; their size is the bytes of the SSE `data:` payloads, and the baseline is
`json.loads` of those payloads.

The SSE parser is timed on one event of growing size, cut into chunks of a fixed size as a slow
network hands them over; its MB/s must stay flat as the event grows (the parser's work per chunk
may not depend on what it has buffered), and the baseline is the same bytes fed in one chunk.

The bytes a run sends with server-side state are counted in `bench.stored`, shown here.
"""

from __future__ import annotations

__all__ = ["rows"]

import copy
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    History,
    Message,
    Text,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
    text_of,
)
from turnstile.providers import WireCache, anthropic_messages, openai_chat, openai_responses
from turnstile.providers._sse import SSEDecoder, events_json

from ._measure import Figure

Row = tuple[str, str, str, str, str]

FORMATS: dict[str, ModuleType] = {
    "anthropic": anthropic_messages,
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = "bench-model"
SYSTEM = "你是一个天气助手。需要实时信息时,先调用工具再回答。"
PROMPT = "北京和上海哪个更暖和?"
TOOLS = (
    ToolSpec(
        "get_weather",
        "查询城市的实时天气",
        {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "城市名,例如 北京"}},
            "required": ["city"],
        },
    ),
)
STEPS = 10
"""Calls timed per run: the loop's last `STEPS` turns up to N turns of history."""
GROWTH_TARGET = 3.0
DELTAS_PER_N = 10
ANSWER = (
    "根据实时天气数据:上海更暖和,目前气温29°C,比北京(26°C)高出3°C。"
    "北京多云,湿度45%;上海晴,湿度68%。"
)


# -- encoding ------------------------------------------------------------------------------------


def _turn(i: int) -> tuple[AssistantMessage, ToolResults]:
    """One realistic turn: a text and a call (with the ids a Responses reply leaves), its result."""
    call = ToolCall(
        f"call_{i:05d}",
        "get_weather",
        {"city": "北京"},
        provider_data={"id": f"fc_{i:05d}", "arguments": '{"city":"北京"}'},
    )
    reply = AssistantMessage([Text("我来帮您查询北京的实时天气。"), call])
    return reply, ToolResults([ToolResult(call.id, '{"温度":26,"天气":"多云","湿度":45}')])


def _request(messages: list[Message] | History) -> ModelRequest:
    return ModelRequest(SYSTEM, messages, TOOLS, 1024)


def encode_per_turn(encode: Callable[..., dict[str, Any]], n: int) -> tuple[float, float, float]:
    """(µs per call over the loop's last `STEPS` calls up to `n` turns, µs to encode the `n`-turn
    request whole, 1.0 when both gave the same body and 0.0 when not)."""
    steps = min(STEPS, n)
    turns = [_turn(i) for i in range(n)]
    ledger: list[Message] = [UserMessage(PROMPT)]
    for reply, results in turns[: n - steps]:
        ledger += (reply, results)
    cache = WireCache()
    encode(_request(History(ledger)), model=MODEL, cache=cache)  # the calls the loop made before
    clock = time.perf_counter_ns
    elapsed = 0
    body: dict[str, Any] = {}
    for reply, results in turns[n - steps :]:
        ledger += (reply, results)
        request = _request(History(ledger))
        t0 = clock()
        body = encode(request, model=MODEL, cache=cache)
        elapsed += clock() - t0
    whole = _request(list(ledger))
    t0 = clock()
    plain = encode(whole, model=MODEL)
    once = clock() - t0
    return elapsed / steps / 1000, once / 1000, float(body == plain)


# -- streams -------------------------------------------------------------------------------------


def _payloads(provider: str) -> list[dict[str, Any]]:
    trace = json.loads((FIXTURES / provider / "weather.stream.json").read_text())
    return events_json(trace["exchanges"][0]["response"]["sse"])


def _first(events: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return copy.deepcopy(next(e for e in events if test(e)))


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _long(deltas: int) -> tuple[list[str], list[str]]:
    """`deltas` text pieces of 3 characters and `deltas` argument pieces of 4, as models send."""
    text = (ANSWER * (deltas * 3 // len(ANSWER) + 1))[: deltas * 3]
    notes = (ANSWER * (deltas * 4 // len(ANSWER) + 1))[: deltas * 4 - 30]
    arguments = json.dumps({"city": "北京", "notes": notes}, ensure_ascii=False)
    return _pieces(text, 3), _pieces(arguments, 4)


def anthropic_stream(deltas: int) -> list[dict[str, Any]]:
    recorded = _payloads("anthropic")
    text, arguments = _long(deltas)
    call = _first(recorded, lambda e: e["type"] == "content_block_start" and e["index"] == 1)
    events = [
        _first(recorded, lambda e: e["type"] == "message_start"),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    events += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
        for t in text
    ]
    events += [{"type": "content_block_stop", "index": 0}, call]
    events += [
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": a},
        }
        for a in arguments
    ]
    events.append({"type": "content_block_stop", "index": 1})
    events.append(_first(recorded, lambda e: e["type"] == "message_delta"))
    events.append({"type": "message_stop"})
    return events


def chat_stream(deltas: int) -> list[dict[str, Any]]:
    recorded = _payloads("openai-chat")
    text, arguments = _long(deltas)
    envelope = {k: v for k, v in recorded[1].items() if k != "choices"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**envelope, "choices": [choice]}

    opening = next(e for e in recorded if e["choices"] and "tool_calls" in e["choices"][0]["delta"])
    events = [recorded[0]]
    events += [chunk({"content": t}) for t in text]
    events.append(opening)
    events += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in arguments
    ]
    events.append(chunk({}, "tool_calls"))
    events.append(recorded[-1])
    return events


def responses_stream(deltas: int) -> list[dict[str, Any]]:
    recorded = _payloads("openai-responses")
    text, arguments = _long(deltas)
    whole_text, whole_arguments = "".join(text), "".join(arguments)

    def of(kind: str, item: str | None = None) -> dict[str, Any]:
        return _first(
            recorded, lambda e: e["type"] == kind and e.get("item", {}).get("type") == item
        )

    message, message_done = (
        of("response.output_item.added", "message"),
        of("response.output_item.done", "message"),
    )
    call, call_done = (
        of("response.output_item.added", "function_call"),
        of("response.output_item.done", "function_call"),
    )
    text_delta, text_done = of("response.output_text.delta"), of("response.output_text.done")
    part, part_done = of("response.content_part.added"), of("response.content_part.done")
    arguments_delta = of("response.function_call_arguments.delta")
    arguments_done = of("response.function_call_arguments.done")
    text_done["text"] = part_done["part"]["text"] = whole_text
    message_done["item"]["content"][0]["text"] = whole_text
    arguments_done["arguments"] = call_done["item"]["arguments"] = whole_arguments
    completed = of("response.completed")
    completed["response"]["output"] = [message_done["item"], call_done["item"]]
    events = [of("response.created"), of("response.in_progress"), message, part]
    events += [{**text_delta, "delta": t} for t in text]
    events += [text_done, part_done, message_done, call]
    events += [{**arguments_delta, "delta": a} for a in arguments]
    events += [arguments_done, call_done, completed]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


STREAMS: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "anthropic": anthropic_stream,
    "openai-chat": chat_stream,
    "openai-responses": responses_stream,
}


def _fold(accumulator: Callable[[], Any], events: list[dict[str, Any]]) -> Any:
    acc = accumulator()
    for event in events:
        acc.feed(event)
    return acc.result()


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e9


def stream_mb_s(provider: str, deltas: int) -> Callable[[], tuple[float, float]]:
    """A measurement: (the accumulator's MB/s, `json.loads`' MB/s) over one stretched stream."""
    events = STREAMS[provider](deltas)
    payloads = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events]
    size = sum(len(p.encode()) for p in payloads) / 1e6
    parsed = [json.loads(p) for p in payloads]
    accumulator = FORMATS[provider].StreamAccumulator
    result = _fold(accumulator, parsed)
    text, arguments = _long(deltas)
    if [text_of(result.content), result.content[-1].arguments] != [
        "".join(text),
        json.loads("".join(arguments)),
    ]:
        raise RuntimeError(f"the {provider} stream did not fold into what it carried")

    def measure() -> tuple[float, float]:
        ours = _seconds(lambda: _fold(accumulator, parsed))
        loads = _seconds(lambda: [json.loads(p) for p in payloads])
        return size / ours, size / loads

    return measure


# -- the SSE parser ------------------------------------------------------------------------------

SSE_CHUNKS = (1024, 16 * 1024)
"""Chunk sizes the parser is fed in: a slow connection's, and a typical socket read's."""
SSE_FLAT = 0.5
"""The target: MB/s on the largest event at least this share of MB/s on the smallest."""


def sse_event(size: int) -> bytes:
    """One `data:` event of about `size` bytes (a long JSON string, as a big tool result or a
    long reasoning item is), with its blank line."""
    text = (ANSWER * (size // len(ANSWER.encode()) + 1)).encode()[: max(size - 40, 0)]
    payload = '{"type":"x","text":"' + text.decode(errors="ignore") + '"}'  # whole characters
    return f"event: x\ndata: {payload}\n\n".encode()


def sse_mb_s(size: int, chunk: int) -> Callable[[], tuple[float, float]]:
    """A measurement: (MB/s fed in `chunk`-byte chunks, MB/s fed in one chunk) for one event."""
    raw = sse_event(size)
    chunks = [raw[i : i + chunk] for i in range(0, len(raw), chunk)]
    megabytes = len(raw) / 1e6

    def parse(pieces: list[bytes]) -> None:
        decoder = SSEDecoder()
        events = [e for piece in pieces for e in decoder.feed(piece)] + decoder.close()
        if len(events) != 1:
            raise RuntimeError(f"the SSE parser gave {len(events)} events for one")

    def measure() -> tuple[float, float]:
        fed = _seconds(lambda: parse(chunks))
        whole = _seconds(lambda: parse([raw]))
        return megabytes / fed, megabytes / whole

    return measure


def sse_rows(sizes: list[int], times: int) -> list[Row]:
    """SSE MB/s for events of 10 KB·N (the sizes' N) in each of `SSE_CHUNKS`."""
    events = [10_000 * n for n in sizes]
    measures = {(chunk, size): sse_mb_s(size, chunk) for chunk in SSE_CHUNKS for size in events}
    results = _interleaved(measures, max(times, 3))
    out: list[Row] = []
    for chunk in SSE_CHUNKS:
        smallest: Figure | None = None
        for size in events:
            fed, whole = (Figure.of(values) for values in results[(chunk, size)])
            smallest = smallest or fed
            if size == events[0]:
                verdict = f"(the reference of ≥{SSE_FLAT:g}×)"
            else:
                share = fed.median / smallest.median
                ok = "pass" if share >= SSE_FLAT else "MISS"
                verdict = f"×{share:.2f} of the smallest ({ok} ≥{SSE_FLAT:g}×)"
            out.append(
                (
                    f"SSE parse MB/s · {chunk // 1024} KB chunks",
                    f"{_size(size)} event",
                    str(fed),
                    f"one chunk {whole.median:,.1f} MB/s",
                    verdict,
                )
            )
    return out


def _size(n: int) -> str:
    return f"{n / 1e6:g} MB" if n >= 1_000_000 else f"{n / 1e3:g} KB"


# -- the table -----------------------------------------------------------------------------------


def _interleaved(
    measures: dict[Any, Callable[[], tuple[float, ...]]], times: int, *, warm: bool = False
) -> dict[Any, list[list[float]]]:
    """Each measurement's values, column by column, over `times` rounds that each run every
    measurement once, so the machine's noise falls on all of them alike; with `warm`, a run whose
    values are dropped goes first each time, so no figure pays for the caches its predecessor
    left cold.

    The inputs built so far are frozen out of the collector (`gc.freeze`): a collection before each
    measurement then costs only the garbage of the last one, and none scans the fixtures."""
    out: dict[Any, list[list[float]]] = {key: [] for key in measures}
    gc.collect()
    gc.freeze()
    try:
        for _ in range(times):
            for key, measure in measures.items():
                if warm:
                    measure()
                gc.collect()
                values = measure()
                out[key] = out[key] or [[] for _ in values]
                for column, value in zip(out[key], values, strict=True):
                    column.append(value)
    finally:
        gc.unfreeze()
    return out


def _ratios(ours: list[float], baseline: list[float]) -> Figure:
    """Per round ours / baseline: both were measured back to back, so they share that moment."""
    return Figure.of([a / b for a, b in zip(ours, baseline, strict=True)])


def encode_rows(sizes: list[int], times: int) -> list[Row]:
    measures = {
        (name, n): (lambda m=module, n=n: encode_per_turn(m.encode, n))
        for name, module in FORMATS.items()
        for n in sizes
    }
    results = _interleaved(measures, times, warm=True)  # type: ignore[arg-type]
    out: list[Row] = []
    for name in FORMATS:
        first: Figure | None = None
        for n in sizes:
            per_turn, whole, same = results[(name, n)]
            ours, plain = Figure.of(per_turn), Figure.of(whole)
            first = first or ours
            verdict = "" if all(same) else "BODY DIFFERS from the uncached one; "
            if n == sizes[0]:
                verdict += f"(the reference of ≤{GROWTH_TARGET:g}×)"
            else:
                growth = ours.median / first.median
                ok = "pass" if growth <= GROWTH_TARGET else "MISS"
                verdict += f"×{growth:.2f} of N={sizes[0]} ({ok} ≤{GROWTH_TARGET:g}×)"
            ratio = _ratios(per_turn, whole).median
            out.append(
                (
                    f"encode µs/turn · {name}",
                    str(n),
                    str(ours),
                    f"whole history re-encoded {plain.median:,.1f} → ×{ratio:.2g}",
                    verdict,
                )
            )
    return out


def stream_rows(sizes: list[int], times: int) -> list[Row]:
    lengths = [DELTAS_PER_N * n for n in sizes]
    measures = {(name, d): stream_mb_s(name, d) for name in FORMATS for d in lengths}
    results = _interleaved(measures, times)
    out: list[Row] = []
    for name in FORMATS:
        shortest: Figure | None = None
        for deltas in lengths:
            ours_values, loads_values = results[(name, deltas)]
            ours, loads = Figure.of(ours_values), Figure.of(loads_values)
            shortest = shortest or ours
            time_ratio = _ratios(loads_values, ours_values).median  # MB/s: time is the inverse
            out.append(
                (
                    f"stream decode MB/s · {name}",
                    f"{2 * deltas:,} deltas",
                    str(ours),
                    f"json.loads {loads.median:,.1f} MB/s → ×{time_ratio:.2f} its time",
                    f"no target; MB/s ×{ours.median / shortest.median:.2f} of the shortest",
                )
            )
    return out


def rows(sizes: list[int], times: int) -> list[Row]:
    """Encode µs per turn for each format at each N, stream-decode MB/s for each format on
    streams of 2·10·N deltas (half text, half tool arguments), SSE-parse MB/s on one event
    of N KB in small and large chunks, and the bytes a 50-turn run sends with server-side state."""
    from .stored import rows as stored_rows  # it builds on this module's conversation

    out = encode_rows(sizes, times) + stream_rows(sizes, times) + sse_rows(sizes, times)
    return out + stored_rows()
