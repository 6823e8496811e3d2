"""Where two runs part: the model calls of two event logs side by side, and the first that differs.

Two runs of one agent (a fork and its parent, one run against two models) are compared model
call by model call. A step is what one model call did: the reply's text, its tool calls with
their arguments and results, its tokens and cost, the failed tries before it. Call ids are left
out (a provider makes up new ones each time), and so are times; a step differs when its text,
its calls' names or arguments, or their results differ.
"""

from __future__ import annotations

__all__ = ["Divergence", "Step", "divergence"]

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from turnstile.core import (
    Denied,
    Event,
    ModelFailed,
    ModelReplied,
    Price,
    Started,
    ToolReturned,
)
from turnstile.core.messages import ToolCall, Usage, UserMessage, text_of


class Call(msgspec.Struct, frozen=True):
    """A tool call as a step shows it: its name and arguments, and what came back."""

    name: str
    arguments: dict[str, Any]
    result: str | None = None  # None: no result was recorded
    is_error: bool = False

    def __str__(self) -> str:
        args = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        shown = "no result" if self.result is None else _short(self.result)
        return f"{self.name}({args}) → {'error: ' if self.is_error else ''}{shown}"


class Step(msgspec.Struct, frozen=True):
    """One model call of a run and what followed from it."""

    model: str | None
    text: str
    calls: tuple[Call, ...]
    usage: Usage
    cost: float | None  # None: no price for the model
    failures: int  # failed tries of this call before its reply


class Divergence(msgspec.Struct, frozen=True):
    """Two runs step by step: `first` is the index of the first step that differs (the prompt
    counts as step 0, so model calls count from 1), None when they agree throughout; `why` says
    how it differs."""

    prompts: tuple[str, str]
    a: tuple[Step, ...]
    b: tuple[Step, ...]
    first: int | None
    why: str

    def report(self) -> str:
        """The comparison as text: the first divergence, then each step side by side."""
        lines = [
            "the runs agree at every step"
            if self.first is None
            else f"first divergence: step {self.first}: {self.why}"
        ]
        same = "same" if self.prompts[0] == self.prompts[1] else _alike(*self.prompts)
        lines.append(f"step 0  prompt: {same}")
        for i in range(max(len(self.a), len(self.b))):
            a = self.a[i] if i < len(self.a) else None
            b = self.b[i] if i < len(self.b) else None
            mark = " " if self.first is None or i + 1 < self.first else "*"
            lines.append(f"step {i + 1}{mark}{_side_by_side(a, b)}")
        lines.append(f"total   {_totals(self.a)}  |  {_totals(self.b)}")
        return "\n".join(lines)


def divergence(
    a: Sequence[Event], b: Sequence[Event], *, prices: Mapping[str, Price] | None = None
) -> Divergence:
    """Compare the event logs `a` and `b` (`Journal.read`, `LoopState.events`) step by step;
    `prices` (a spec's, by model) give each step's cost."""
    prompts = (_prompt(a), _prompt(b))
    steps_a, steps_b = _steps(a, prices or {}), _steps(b, prices or {})
    first, why = None, ""
    if prompts[0] != prompts[1]:
        first, why = 0, f"the prompts differ ({_alike(*prompts)})"
    else:
        for i in range(max(len(steps_a), len(steps_b))):
            if i >= len(steps_a) or i >= len(steps_b):
                longer = "b" if i >= len(steps_a) else "a"
                first, why = i + 1, f"only {longer} goes on"
                break
            why = _difference(steps_a[i], steps_b[i])
            if why:
                first = i + 1
                break
    return Divergence(prompts, tuple(steps_a), tuple(steps_b), first, why)


def _prompt(events: Sequence[Event]) -> str:
    """The text of the user's messages a run started from (its first `Started`)."""
    for event in events:
        if type(event) is Started:
            return "\n".join(text_of(m.content) for m in event.messages if type(m) is UserMessage)
    return ""


def _steps(events: Sequence[Event], prices: Mapping[str, Price]) -> list[Step]:
    steps: list[Step] = []
    failures = 0
    calls: dict[str, Call] = {}  # the last reply's calls by id, as results come in
    order: list[str] = []

    def close() -> None:  # the last step's calls have all their results now
        if steps and order:
            steps[-1] = msgspec.structs.replace(steps[-1], calls=tuple(calls[i] for i in order))

    for event in events:
        if type(event) is ModelFailed:
            failures += 1
        elif type(event) is ModelReplied:
            close()
            content = event.response.content
            found = [p for p in content if type(p) is ToolCall]
            calls = {c.id: Call(c.name, c.arguments) for c in found}
            order = [c.id for c in found]
            price = prices.get(event.model) if event.model is not None else None
            usage = event.response.usage
            text = text_of(content)
            cost = None if price is None else price.of(usage)
            steps.append(Step(event.model, text, tuple(calls.values()), usage, cost, failures))
            failures = 0
        elif type(event) is ToolReturned and event.call_id in calls:
            result = text_of(event.content)
            calls[event.call_id] = msgspec.structs.replace(
                calls[event.call_id], result=result, is_error=event.is_error
            )
        elif type(event) is Denied and event.call_id in calls:
            denied = f"denied: {event.reason or 'no reason given'}"
            calls[event.call_id] = msgspec.structs.replace(
                calls[event.call_id], result=denied, is_error=True
            )
    close()
    return steps


def _difference(a: Step, b: Step) -> str:
    """How step `a` differs from step `b` (the first thing that does), or ""."""
    names = ([c.name for c in a.calls], [c.name for c in b.calls])
    if names[0] != names[1]:
        return f"the tools called differ ({_names(names[0])} / {_names(names[1])})"
    for x, y in zip(a.calls, b.calls, strict=True):
        if x.arguments != y.arguments:
            return f"{x.name} is called with other arguments ({x} / {y})"
    for x, y in zip(a.calls, b.calls, strict=True):
        if (x.result, x.is_error) != (y.result, y.is_error):
            return f"{x.name} returned something else ({x} / {y})"
    if a.text != b.text:
        return f"the replies' text differs ({_alike(a.text, b.text)})"
    return ""


def _alike(a: str, b: str) -> str:
    """A one-line summary of how far two texts differ."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    added = sum(j2 - j1 for op, _, _, j1, j2 in matcher.get_opcodes() if op != "equal")
    removed = sum(i2 - i1 for op, i1, i2, _, _ in matcher.get_opcodes() if op != "equal")
    return f"{matcher.ratio():.0%} alike, -{removed} +{added} characters"


def _names(names: list[str]) -> str:
    return ", ".join(names) or "none"


def _short(text: str, width: int = 40) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _side(step: Step | None) -> str:
    if step is None:
        return "—"
    calls = "; ".join(str(c) for c in step.calls) or _short(step.text) or "(no text)"
    retries = f" ({step.failures} failed)" if step.failures else ""
    return f"{step.model or '?'}{retries}: {calls}"


def _tokens(step: Step | None) -> str:
    if step is None:
        return "—"
    cost = "" if step.cost is None else f", cost {step.cost:.6f}"
    return f"{step.usage.input_tokens} in / {step.usage.output_tokens} out{cost}"


def _side_by_side(a: Step | None, b: Step | None) -> str:
    return f"  {_side(a)}  |  {_side(b)}\n        tokens {_tokens(a)}  |  {_tokens(b)}"


def _totals(steps: Sequence[Step]) -> str:
    usage = sum((s.usage for s in steps), Usage())
    costs = [s.cost for s in steps if s.cost is not None]
    cost = f", cost {sum(costs):.6f}" if costs else ""
    return f"{len(steps)} steps, {usage.input_tokens} in / {usage.output_tokens} out{cost}"
