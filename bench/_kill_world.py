"""The world of the kill campaign: tools whose effects land in a side file, and a scripted agent
whose calls follow a plan drawn from a seed, so every process of a run makes the same calls.

Each tool appends its call id to the side file (`O_APPEND`, one write, fsync), which counts
how often each call really ran. `pay` (effect, then a nap) and `send` (a nap, then the effect)
must not run twice; `read` (a nap, then the effect) and `fetch` (the effect, then a big result)
are replay-safe. The tools live at a module's top level so a `Sandbox` can import them.
"""

from __future__ import annotations

__all__ = [
    "BIG",
    "INTERRUPTED",
    "REPLAY_SAFE",
    "TOOLS",
    "Agent",
    "Plan",
    "effects",
    "plan",
    "spec",
]

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from turnstile.core import Guards, LoopSpec, ModelRequest, Tool, ToolContext, tool
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Part,
    Text,
    ToolCall,
    ToolResults,
    Usage,
)

INTERRUPTED = "interrupted"
"""How the result of a call a kill interrupted begins (a call that is not replay-safe)."""
BIG = 4 * 1024 * 1024
"""The size of `fetch`'s result: a record long enough that a kill may land inside its write."""


def _effect(side: str, context: ToolContext) -> None:
    fd = os.open(side, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{context.call_id}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@tool
def pay(side: str, ms: int, n: int, context: ToolContext) -> str:
    """Pay, then wait: running it twice pays twice."""
    _effect(side, context)
    time.sleep(ms / 1000)
    return f"paid {n}"


@tool(parallel_safe=False)
def send(side: str, ms: int, n: int, context: ToolContext) -> str:
    """Wait, then send a message: running it twice sends it twice. One at a time."""
    time.sleep(ms / 1000)
    _effect(side, context)
    return f"sent {n}"


@tool(replay_safe=True)
def read(side: str, ms: int, n: int, context: ToolContext) -> str:
    """Wait, then read: harmless to run again."""
    time.sleep(ms / 1000)
    _effect(side, context)
    return f"read {n}"


@tool(replay_safe=True)
def fetch(side: str, ms: int, n: int, context: ToolContext) -> str:
    """Fetch a big page: harmless to run again."""
    _effect(side, context)
    time.sleep(ms / 1000)
    return f"fetched {n} " + "x" * BIG


TOOLS: tuple[Tool, ...] = (pay, send, read, fetch)
REPLAY_SAFE = frozenset(t.spec.name for t in TOOLS if t.spec.replay_safe)


def spec() -> LoopSpec:
    """The run's spec: the guards that could end a run on interrupted calls (a round of them is
    a failed round) or on big results are off, so every run can complete."""
    guards = Guards(context_window=None, max_failed_rounds=None)
    return LoopSpec(tools=tuple(t.spec for t in TOOLS), guards=guards)


class Turn(NamedTuple):
    calls: list[ToolCall]
    think_ms: int  # how long the model takes to make this turn's reply
    words: int  # how much text comes with the calls


class Plan(NamedTuple):
    turns: list[Turn]
    answer_ms: int

    @property
    def calls(self) -> dict[str, str]:
        """Every call the plan makes: its id and its tool's name."""
        return {c.id: c.name for turn in self.turns for c in turn.calls}


def plan(seed: int, side: str) -> Plan:
    """3-5 turns of 2-4 calls each, naps of 1-12 ms, the model thinking 2-20 ms a reply; the
    same for the same seed."""
    rng = random.Random(seed)
    turns = []
    for t in range(rng.randint(3, 5)):
        calls = [
            ToolCall(
                f"t{t}c{i}",
                rng.choice(TOOLS).spec.name,
                {"side": side, "ms": rng.randint(1, 12), "n": 10 * t + i},
            )
            for i in range(rng.randint(2, 4))
        ]
        turns.append(Turn(calls, rng.randint(2, 20), rng.choice([0, 50, 5000])))
    return Plan(turns, rng.randint(2, 20))


class Agent:
    """A model client that plays `plan`: the reply to a request with N rounds of results is
    turn N (after its think time), then the answer, decided from the request alone."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def _reply(self, request: ModelRequest) -> tuple[float, ModelResponse]:
        done = sum(type(m) is ToolResults for m in request.messages)
        if done >= len(self.plan.turns):
            answer = ModelResponse([Text("all done")], ModelStop.end_turn, Usage(1, 1))
            return self.plan.answer_ms / 1000, answer
        turn = self.plan.turns[done]
        parts: list[Part] = [Text(" ".join(["word"] * turn.words))] if turn.words else []
        response = ModelResponse([*parts, *turn.calls], ModelStop.tool_use, Usage(1, 1))
        return turn.think_ms / 1000, response

    def complete(self, request: ModelRequest) -> ModelResponse:
        wait, response = self._reply(request)
        time.sleep(wait)
        return response

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        import trio

        wait, response = self._reply(request)
        await trio.sleep(wait)
        return response


def effects(side: Path) -> Counter[str]:
    """How many times each call id is in the side file (a line cut short counts as its own)."""
    return Counter(side.read_text().splitlines())
