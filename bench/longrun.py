"""What a 200-turn run costs, with and without prompt caching and compaction.

The run is the core `Loop` reading file after file (a thinking block and a `read` call each
turn, a 600-byte result, the answer on the last), each request encoded by the Anthropic codec
as a `Client` would. Its usage is read off the bodies by `caching.PromptCache` (the same
estimate of the API's cache as the caching rows) and handed back in each reply, so the loop
prices the run itself: `LoopState.cost`, at Claude Sonnet 4.5's list prices per million tokens
($3 input, $15 output, $0.30 cache read, $3.75 cache write). Without compaction the window is
unbounded; with it, 24,000 tokens (the context guard keeps 1,000 free), compacted at 80 %.
"""

from __future__ import annotations

__all__ = ["rows", "run_cost"]

from collections import deque

import msgspec
from turnstile.core import (
    CallModel,
    Compaction,
    Finish,
    Guards,
    Loop,
    LoopSpec,
    ModelReplied,
    Price,
    RunTool,
    StopReason,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    Thinking,
    ToolCall,
    Usage,
    estimate_tokens,
)
from turnstile.core.request import CachePolicy, Purpose
from turnstile.providers import WireCache, anthropic_messages

from .caching import PromptCache

Row = tuple[str, str, str, str, str]

TURNS = 200
WINDOW = 24_000
MODEL = "claude-sonnet-4-5"
SONNET = Price(input=3.0, output=15.0, cache_read=0.30, cache_write=3.75)
SYSTEM = "You read files for the user. Call read for each file, one at a time."
READ = ToolSpec(
    "read",
    "The text of file n.",
    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
)


def _reply(turn: int, request_purpose: Purpose) -> ModelResponse:
    if request_purpose is Purpose.summarize:
        text = (
            f"Files 1-{turn} read so far; each holds its number and a run of x. Next: {turn + 1}."
        )
        return ModelResponse([Text(text)], ModelStop.end_turn)
    if turn == TURNS:
        return ModelResponse([Text(f"All {TURNS - 1} files hold x.")], ModelStop.end_turn)
    thought = Thinking(f"File {turn - 1} was x again; file {turn} next.", signature=f"sig-{turn}")
    return ModelResponse(
        [thought, ToolCall(f"toolu_{turn:04}", "read", {"n": turn})], ModelStop.tool_use
    )


def run_cost(
    cache: bool, compaction: Compaction | None
) -> tuple[float, Usage, int, StopReason, int]:
    """The run's cost (the loop's own, `LoopState.cost`), its usage, its compactions, why it
    stopped, and after how many turns."""
    guards = Guards(
        max_turns=None,
        deadline_s=None,
        max_repeated_calls=None,
        max_stalled_rounds=None,
        context_window=None if compaction is None else WINDOW,
        reserve_tokens=1_000,
    )
    spec = LoopSpec(
        system=SYSTEM,
        tools=(READ,),
        guards=guards,
        cache=CachePolicy(enabled=cache),
        models=(MODEL,),
        prices={MODEL: SONNET},
        compaction=compaction,
    )
    loop, wire, prompt_cache, now, turn = Loop(spec), WireCache(), PromptCache(), 0.0, 0
    commands = deque(loop.start("Read files 1 to 199 and tell me what they hold.", now))
    while commands:
        now += 1.0
        match commands.popleft():
            case CallModel(id=key, request=request):
                body = anthropic_messages.encode(request, model=MODEL, cache=wire)
                read, written, whole = prompt_cache.send(body)
                if request.purpose is Purpose.turn:
                    turn += 1
                reply = _reply(turn, request.purpose)
                out = estimate_tokens(msgspec.json.encode(reply.content).decode())
                usage = Usage(whole, out, read if cache else 0, written if cache else 0)
                reply = ModelResponse(reply.content, reply.stop, usage)
                commands.extend(loop.send(ModelReplied(key, reply, now=now)))
            case RunTool(id=key, arguments=arguments):
                content = f"file {arguments['n']}: " + "x" * 600
                commands.extend(loop.send(ToolReturned(key, content, now=now)))
            case Finish():
                break
    st = loop.state
    return st.cost, st.usage, len(st.compactions), st.stop_reason, st.turns


def rows(sizes: list[int], times: int) -> list[Row]:
    """One row per (compaction, caching), each against the run with neither (a cost, not a
    timing: `sizes` and `times` do not change it)."""
    variants: list[tuple[str, Compaction | None]] = [
        ("no compaction", None),
        ("clear_tool_results", Compaction(strategy="clear_tool_results")),
        ("drop_turns", Compaction(strategy="drop_turns")),
        ("summarize", Compaction(strategy="summarize")),
    ]
    base = run_cost(False, None)[0]
    out: list[Row] = []
    for name, compaction in variants:
        for cache in (False, True):
            cost, usage, compactions, stop, turns = run_cost(cache, compaction)
            window = "" if compaction is None else f", {WINDOW:,}-token window"
            made = f", {compactions} compactions" if compactions else ""
            ended = "" if stop is StopReason.completed else f", {stop.value} after {turns} turns"
            tokens = f"{usage.input_tokens:,} in, {usage.cache_read_tokens:,} read"
            figure = f"${cost:.3f} ({tokens}{made}{ended})"
            ratio = (
                "baseline (Sonnet 4.5 prices)"
                if cost == base
                else f"${base:.3f} → ×{cost / base:.2f}"
            )
            label = f"200-turn run cost, {name}, {'cached' if cache else 'uncached'}{window}"
            out.append((label, f"{TURNS} turns", figure, ratio, ""))
    return out
