"""What prompt caching saves: billed-equivalent input tokens of a scripted 50-turn run with
Anthropic's breakpoints, against the same run uncached.

The run is the core `Loop` with scripted replies (a call to `get_weather` each turn, its
result, a final answer on the last), each request encoded by the codec as a `Client` would
(through a `WireCache`). The bill is read off those request bodies. A body is cut into the
pieces the API caches in order: each tool, each system block, then each block of each message.
A piece's tokens are `turnstile.core.messages.estimate_tokens` of its JSON text (sorted keys,
without its `cache_control`): an estimate of about 3 UTF-8 bytes a token, the same for both runs.

The cache, as the prompt caching docs describe it: a request writes the prefix up to each of its
breakpoints whose prefix holds at least `MIN_CACHED` tokens; the next finds a prefix it wrote
again at one of its own breakpoints, or up to 20 blocks before one, if every piece up to it is
byte-identical. Read pieces cost `READ` (0.1×) of the input price, the pieces from there to
the last breakpoint are written at `WRITE` (1.25×, the 5-minute cache's), the rest costs 1×.
Every call of a run comes well within the 5 minutes a write lives.
"""

from __future__ import annotations

__all__ = ["PromptCache", "bill", "pieces", "rows", "scripted_bodies"]

import json
from collections import deque
from types import ModuleType
from typing import Any

from turnstile.core import (
    CallModel,
    Finish,
    Guards,
    Loop,
    LoopSpec,
    ModelReplied,
    RunTool,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage, estimate_tokens
from turnstile.core.request import CachePolicy
from turnstile.providers import WireCache, anthropic_messages

Row = tuple[str, str, str, str, str]

TURNS = 50
READ, WRITE = 0.1, 1.25
MIN_CACHED = 1024
"""The fewest tokens a cached prefix may hold (Claude Sonnet and Opus; Haiku's is larger)."""
LOOKBACK = 20
SYSTEM = "You compare the weather of cities. Call get_weather for each city you need."
TOOL = ToolSpec(
    "get_weather",
    "The current weather of a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
RESULT = '{{"city": "{city}", "temp_c": {temp}, "sky": "clear", "humidity": 0.{temp}}}'


def _reply(turn: int, turns: int) -> ModelResponse:
    if turn == turns:
        return ModelResponse(
            [Text(f"Of the {turns - 1} cities, city 7 is warmest.")], ModelStop.end_turn
        )
    call = ToolCall(f"toolu_{turn:04}", "get_weather", {"city": f"city {turn}"})
    return ModelResponse([Text(f"Next, city {turn}."), call], ModelStop.tool_use, Usage(1, 1))


def scripted_bodies(
    codec: ModuleType, turns: int = TURNS, cache: bool = True
) -> list[dict[str, Any]]:
    """The request bodies `codec.encode` writes for a `turns`-call scripted run, caching on or
    off in the spec."""
    guards = Guards(
        max_turns=None,
        deadline_s=None,
        max_repeated_calls=None,
        max_stalled_rounds=None,
        context_window=None,
    )
    spec = LoopSpec(system=SYSTEM, tools=(TOOL,), guards=guards, cache=CachePolicy(enabled=cache))
    loop, wire, now = Loop(spec), WireCache(), 0.0
    bodies: list[dict[str, Any]] = []
    commands = deque(loop.start("Which of the cities is warmest? Check them one by one.", now))
    while commands:
        now += 1.0
        match commands.popleft():
            case CallModel(id=key, request=request):
                bodies.append(codec.encode(request, model="bench-model", cache=wire))
                reply = _reply(len(bodies), turns)
                commands.extend(loop.send(ModelReplied(key, reply, now=now)))
            case RunTool(id=key, arguments=arguments):
                city = arguments["city"]
                content = RESULT.format(city=city, temp=10 + len(bodies) % 20)
                commands.extend(loop.send(ToolReturned(key, content, now=now)))
            case Finish():
                break
    return bodies


def _text(piece: Any) -> str:
    if isinstance(piece, dict):
        piece = {k: v for k, v in piece.items() if k != "cache_control"}
    return json.dumps(piece, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def pieces(body: dict[str, Any]) -> tuple[list[str], list[int]]:
    """An Anthropic body in the order the API caches it (each tool, each system block, each
    block of each message, tagged with its message's place and role), each piece as its JSON
    text without `cache_control`; and the indices of the pieces that carry a breakpoint."""
    out: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools", [])]
    system = body.get("system")
    out += [("system", b) for b in ([system] if isinstance(system, str) else system or [])]
    for i, message in enumerate(body["messages"]):
        content = message["content"]
        blocks = [content] if isinstance(content, str) else content
        out += [(f"{i} {message['role']}", b) for b in blocks]
    marks = [n for n, (_, p) in enumerate(out) if isinstance(p, dict) and "cache_control" in p]
    return [f"{where} {_text(p)}" for where, p in out], marks


class PromptCache:
    """The API's prompt cache as the module docstring describes it, request after request."""

    def __init__(self) -> None:
        self._cached: set[tuple[str, ...]] = set()

    def send(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """The tokens of `body`'s prompt read from the cache, written to it, and in all."""
        texts, marks = pieces(body)
        tokens = [estimate_tokens(t) for t in texts]
        ends = [sum(tokens[: n + 1]) for n in range(len(tokens))]  # tokens up to piece n
        hit = -1
        for mark in marks:
            for n in range(mark, max(mark - LOOKBACK, -1), -1):
                if n > hit and tuple(texts[: n + 1]) in self._cached:
                    hit = n
                    break
        read = ends[hit] if hit >= 0 else 0
        last = max(marks, default=-1)
        written = ends[last] - read if last > hit and ends[last] >= MIN_CACHED else 0
        self._cached.update(tuple(texts[: m + 1]) for m in marks if ends[m] >= MIN_CACHED)
        return read, written, ends[-1] if ends else 0


def bill(bodies: list[dict[str, Any]]) -> tuple[float, int, int, int]:
    """The billed-equivalent input tokens of `bodies` sent in order, and of them the tokens read
    from the cache, written to it, and the whole prompts' total."""
    cache = PromptCache()
    billed, read_total, written_total, total = 0.0, 0, 0, 0
    for body in bodies:
        read, written, whole = cache.send(body)
        billed += READ * read + WRITE * written + (whole - read - written)
        read_total, written_total, total = read_total + read, written_total + written, total + whole
    return billed, read_total, written_total, total


def rows(sizes: list[int], times: int) -> list[Row]:
    """The cached run's billed-equivalent input tokens against the uncached run's (a count, not
    a timing: `sizes` and `times` do not change it)."""
    uncached = bill(scripted_bodies(anthropic_messages, cache=False))[0]
    billed, read, written, total = bill(scripted_bodies(anthropic_messages))
    return [
        (
            "anthropic input tokens billed, uncached",
            f"{TURNS} calls",
            f"{uncached:,.0f}",
            "baseline (estimate_tokens of the bodies)",
            "",
        ),
        (
            "anthropic input tokens billed, cached",
            f"{TURNS} calls",
            f"{billed:,.0f} ({read:,} read 0.1×, {written:,} written 1.25×, of {total:,})",
            f"uncached {uncached:,.0f} → ×{billed / uncached:.2f}",
            "",
        ),
    ]
