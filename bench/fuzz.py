"""`python -m bench.fuzz [--inputs 50000] [--seed 1]`: the codecs against mutated real replies.

Every reply recorded in `fixtures/` (bodies and event streams, of all three formats), with an
error body of each format, is a seed. Each input is a seed changed by one to three random
mutations, sent through one way in:

- `decode`: a codec's `decode` on a mutated body (a value replaced by one of another type, a
  null, a huge or negative number, a lone surrogate, a nest 3,000 deep as a value or as text
  (tool arguments, `[[[...`, `{"a":{"a":...`); a key dropped; a `type` swapped for another
  seen anywhere in the seeds; an array's items dropped, doubled or swapped);
- `stream`: a codec's `StreamAccumulator` fed a stream's events, some mutated as above, some
  dropped, doubled, moved or taken from another stream of the same format, then `result()`;
- `bytes`: the client's own reading of raw bytes (`read_body` for a body, `StreamReader` for an
  event stream in random chunks) after bytes are cut, doubled, flipped or inserted (a depth
  bomb among them).

One input in `HUGE_EVERY` is made 10 MB long instead: a string in it holds 10 MB of text, or
10 MB of bytes (text, nesting, a long array) go into its bytes.

An input passes when it gives a reply or raises `DecodeError` or `ProviderError`, within
`LIMIT_MS` if it is under 10 KB, and when what it gives can go into a run: its deltas encode as
JSON (no lone surrogate), an error's `retry_after` is None or a finite number of seconds, and a
loop that is handed the reply (`ModelReplied`) or the failure (`ModelFailed`) takes it, dumps its
state and loads it again. The script prints the counts (inputs by way in, outcomes, the kinds
of `ProviderError`, the slowest input) and every input that failed, and exits 1 if one did.
The test suite runs 2,000 of the same inputs (`run`).
"""

from __future__ import annotations

__all__ = ["Failure", "Report", "run"]

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from turnstile.core import Loop, LoopSpec, ModelFailed, ModelReplied, TurnstileError
from turnstile.core.messages import ModelResponse
from turnstile.providers import DecodeError, ProviderError
from turnstile.providers._client import StreamReader, Wire, read_body
from turnstile.providers._sse import events_json
from turnstile.providers.replay import CLIENTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIMIT_MS = 100.0
SMALL = 10_000
"""Inputs under this many bytes must be done within `LIMIT_MS`."""
DEEP = 3_000
HUGE = 10_000_000
HUGE_EVERY = 500
INDEX_KEYS = ["type", "index", "output_index", "content_index", "summary_index", "sequence_number"]

ERROR_BODIES = {
    "anthropic": {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded", "details": None},
        "request_id": "req_011",
    },
    "openai-chat": {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    },
    "openai-responses": {
        "error": {"message": "You exceeded your quota", "type": "insufficient_quota", "code": None}
    },
}


@dataclass
class Seed:
    provider: str
    name: str
    body: Any = None  # a JSON body, or
    events: list[dict[str, Any]] | None = None  # a stream's event payloads, and
    sse: str | None = None  # its text


def seeds() -> list[Seed]:
    """Every recorded reply in `fixtures/`, an error body of each format, and two Responses
    replies made from the recorded ones: a stream with reasoning summaries (no trace streams
    one) and a body with every item only the client can answer."""
    out = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        trace = json.loads(path.read_text())
        for n, exchange in enumerate(trace["exchanges"]):
            response = exchange["response"]
            name = f"{path.parent.name}/{path.name}#{n}"
            if response.get("sse") is not None:
                sse = response["sse"]
                out.append(Seed(trace["provider"], name, events=events_json(sse), sse=sse))
            elif response.get("body") is not None:
                out.append(Seed(trace["provider"], name, body=response["body"]))
    out += [Seed(p, f"{p} error body", body=b) for p, b in ERROR_BODIES.items()]
    reasoning = json.loads((FIXTURES / "openai-responses/reasoning.json").read_text())
    body = reasoning["exchanges"][0]["response"]["body"]
    body["output"][0]["summary"] = [
        {"type": "summary_text", "text": "**比较天气**\n\n先查北京。"},
        {"type": "summary_text", "text": "再查上海 😀。"},
    ]
    events = responses_events(body)
    sse = "".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events
    )
    out.append(Seed("openai-responses", "reasoning.json streamed", events=events, sse=sse))
    out.append(Seed("openai-responses", "reasoning.json with client items", body=_with_items(body)))
    return out


def _pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def responses_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events streaming a Response body would give, as the SDK's event types describe them."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**body, "status": "in_progress", "output": []}}
    ]
    for at, item in enumerate(body["output"]):
        opened = {**item}
        if item["type"] == "message":
            opened["content"] = []
        elif item["type"] == "reasoning":
            opened["summary"] = []
        elif item["type"] == "function_call":
            opened.update(arguments="", status="in_progress")
        events.append({"type": "response.output_item.added", "output_index": at, "item": opened})
        where = {"item_id": item.get("id"), "output_index": at}
        for si, entry in enumerate(item.get("summary", [])):
            part = {"type": "summary_text", "text": ""}
            events.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **where,
                    "summary_index": si,
                    "part": part,
                }
            )
            events += [
                {
                    "type": "response.reasoning_summary_text.delta",
                    **where,
                    "summary_index": si,
                    "delta": piece,
                }
                for piece in _pieces(entry["text"])
            ]
        for ci, part in enumerate(item.get("content", [])):
            events.append(
                {
                    "type": "response.content_part.added",
                    **where,
                    "content_index": ci,
                    "part": {**part, "text": ""},
                }
            )
            events += [
                {"type": "response.output_text.delta", **where, "content_index": ci, "delta": piece}
                for piece in _pieces(part.get("text", ""))
            ]
        if item["type"] == "function_call":
            events += [
                {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                for piece in _pieces(item["arguments"])
            ]
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    events.append({"type": "response.completed", "response": body})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def _with_items(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with a function call a program made (still `in_progress`) and one item of each
    kind only the client can answer, shaped as the SDK's types describe them."""
    items = [
        {
            **body["output"][1],
            "status": "in_progress",
            "caller": {"type": "program", "caller_id": "call_p"},
        },
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "call_l",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {
            "type": "shell_call",
            "id": "sh_1",
            "call_id": "call_s",
            "status": "completed",
            "action": {"commands": ["ls"], "timeout_ms": 1000},
        },
        {
            "type": "apply_patch_call",
            "id": "ap_1",
            "call_id": "call_a",
            "status": "completed",
            "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@"},
        },
        {
            "type": "mcp_approval_request",
            "id": "mcpr_1",
            "name": "f",
            "arguments": "{}",
            "server_label": "s",
        },
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c", "name": "g", "input": "x"},
        {
            "type": "computer_call",
            "id": "cu_1",
            "call_id": "call_u",
            "status": "completed",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
        },
    ]
    return {**body, "output": [body["output"][0], *items]}


# -- values and mutations ------------------------------------------------------------------------


def _deep(kind: type, inner: Any = 1) -> Any:
    """`inner` nested `DEEP` levels in arrays or objects (built without recursion)."""
    value = inner
    for _ in range(DEEP):
        value = [value] if kind is list else {"a": value}
    return value


_BOMBS = [
    "[" * DEEP,
    '{"a":' * DEEP,
    '{"a": ' + "[" * DEEP + "]" * DEEP + "}",
    '{"a": ' + '{"a":' * DEEP + "1" + "}" * DEEP + "}",
]
"""Depth bombs as text: cut short or whole, at the top or inside an object (tool arguments)."""


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value, made without recursion (it may nest `DEEP` levels)."""
    if not isinstance(value, dict | list):
        return value
    root: Any = type(value)()
    stack = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(child, dict | list):
                child, inner = type(child)(), child
                stack.append((inner, child))
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return root


def _strings(value: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    stack = [(key, value)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend((None, v) for v in value)


class Mutator:
    """Random changes to JSON values, drawing names from the seeds (types, stop reasons)."""

    def __init__(self, rng: random.Random, pool: list[Seed]) -> None:
        self.rng = rng
        names: set[str] = set()
        for seed in pool:
            for body in [seed.body, *(seed.events or [])]:
                for key, value in _strings(body):
                    if key in ("type", "status", "stop_reason", "finish_reason", "role"):
                        if isinstance(value, str):
                            names.add(value)
        self.names = sorted(names)

    def value(self) -> Any:
        rng = self.rng
        choices: list[Callable[[], Any]] = [
            lambda: None,
            lambda: rng.choice([True, False]),
            lambda: rng.choice([0, -1, 1, 2, 3, 7, 10**9, 2**63, 2**70, -(2**70)]),
            lambda: rng.choice([0.5, -1.5, 1e300, float("nan"), float("inf")]),
            lambda: rng.choice(["", "x", "北京", "\ud800", "a\udc00b", "\ud83d", "\ude00"]),
            lambda: rng.choice(self.names),
            lambda: rng.choice([[], {}, [None], {"type": None}, {"type": rng.choice(self.names)}]),
            lambda: _deep(rng.choice([list, dict])),
            lambda: rng.choice(['{"a": 1}', "{", '{"a": "\\ud800"}', "{}", *_BOMBS]),
        ]
        return rng.choice(choices)()

    def _slots(self, root: Any) -> list[tuple[Any, Any]]:
        """(container, key) of the values inside `root` down to 20 levels, iteratively."""
        slots: list[tuple[Any, Any]] = []
        stack = [(root, 0)]
        while stack:
            node, depth = stack.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                slots.append((node, key))
                if isinstance(child, dict | list) and depth < 20:
                    stack.append((child, depth + 1))
        return slots

    def tree(self, root: Any) -> Any:
        """`root` (a JSON value, copied) with one random change somewhere inside it."""
        root = _copy(root)
        if not isinstance(root, dict | list) or not root:
            return self.value() if self.rng.random() < 0.5 else root
        rng = self.rng
        container, key = rng.choice(self._slots(root))
        op = rng.randrange(7)
        if op == 0 or op == 1:
            container[key] = self.value()
        elif op == 2:
            del container[key]
        elif op == 3 and isinstance(container[key], str):
            container[key] = rng.choice(self.names)
        elif op == 4 and isinstance(container, dict):
            container[rng.choice(INDEX_KEYS)] = (
                self.value() if rng.random() < 0.5 else rng.choice(self.names)
            )
        elif op == 5 and isinstance(container[key], list) and container[key]:
            items = container[key]
            i = rng.randrange(len(items))
            rng.choice([items.insert, lambda j, v: items.append(v)])(i, _copy(items[i]))
        elif op == 6 and isinstance(container[key], str):
            text = container[key]
            cut = rng.randrange(len(text) + 1)
            container[key] = text[:cut] + rng.choice(["\ud800", "\udfff", "\ud83d", ""])
        else:
            container[key] = self.value()
        return root

    def huge(self, item: Any) -> Any:
        """`item` made about `HUGE` bytes long: 10 MB of text, nesting or an array's items put
        into its bytes, or one of its strings holding 10 MB of text."""
        rng = self.rng
        if isinstance(item, bytes):
            at = rng.randrange(len(item) + 1)
            fill = rng.choice([b" ", b"x", b"[", b"1,", "晴".encode()])
            return item[:at] + fill * (HUGE // len(fill)) + item[at:]
        text = rng.choice(["x" * HUGE, "晴" * (HUGE // 3)])
        root = _copy(item)
        if not isinstance(root, dict | list) or not root:
            return text
        slots = [(c, k) for c, k in self._slots(root) if isinstance(c[k], str)]
        container, key = rng.choice(slots or self._slots(root))
        container[key] = text
        return root

    def events(self, events: list[Any], others: list[Any]) -> list[Any]:
        rng = self.rng
        events = list(events)
        op = rng.randrange(6)
        if op <= 1 and events:
            i = rng.randrange(len(events))
            events[i] = self.tree(events[i])
        elif op == 2 and events:
            del events[rng.randrange(len(events))]
        elif op == 3 and events:
            i = rng.randrange(len(events))
            events.insert(rng.randrange(len(events) + 1), _copy(events[i]))
        elif op == 4 and len(events) > 1:
            i, j = rng.randrange(len(events)), rng.randrange(len(events))
            events[i], events[j] = events[j], events[i]
        elif others:
            events.insert(rng.randrange(len(events) + 1), _copy(rng.choice(others)))
        return events

    def raw(self, data: bytes) -> bytes:
        rng = self.rng
        if not data:
            return rng.choice([b"", b"{", b"data: {}\n\n"])
        i = rng.randrange(len(data))
        j = min(len(data), i + rng.randrange(1, 64))
        op = rng.randrange(5)
        if op == 0:
            return data[:i] + data[j:]
        if op == 1:
            return data[:j] + data[i:]
        if op == 2:
            return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
        if op == 3:
            insert = rng.choice(
                [
                    b"\r",
                    b"\n",
                    b"\r\n\r\n",
                    b":",
                    b"data: ",
                    b"[DONE]",
                    b"\xff",
                    b"\xe5\x8c",
                    b"\\ud800",
                    *(bomb.encode() for bomb in _BOMBS),
                    b'"',
                    b"\x00",
                    b"data: [DONE]\n\n",
                ]
            )
            return data[:i] + insert + data[i:]
        return data[:i]


# -- running ---------------------------------------------------------------------------------------


@dataclass
class Failure:
    way: str
    seed: str
    problem: str
    shown: str


@dataclass
class Report:
    inputs: int = 0
    huge: int = 0
    ways: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    max_ms: float = 0.0
    max_ms_bytes: int = 0
    failures: list[Failure] = field(default_factory=list)

    def lines(self) -> list[str]:
        top = self.kinds.most_common(8)
        rest = sum(self.kinds.values()) - sum(n for _, n in top)
        others = f", {rest:,} of {len(self.kinds) - len(top)} other kinds" if rest else ""
        untyped = sum(n for k, n in self.outcomes.items() if k.startswith("untyped"))
        out = [
            f"inputs: {self.inputs:,} ({', '.join(f'{k} {v:,}' for k, v in self.ways.items())})"
            f", {self.huge:,} of them 10 MB long",
            "outcomes: " + ", ".join(f"{k} {v:,}" for k, v in self.outcomes.most_common()),
            "ProviderError kinds: " + ", ".join(f"{k} {v:,}" for k, v in top) + others,
            f"max time: {self.max_ms:.1f} ms (an input of {self.max_ms_bytes:,} bytes)",
            f"untyped errors: {untyped:,}",
            f"failures: {len(self.failures)}",
        ]
        out += [f"  {f.way} {f.seed}: {f.problem}\n    {f.shown}" for f in self.failures[:50]]
        return [line.encode("utf-8", "backslashreplace").decode() for line in out]


def _size(value: Any) -> int:
    """About the bytes of `value` as JSON, counted without recursion."""
    total = 0
    for _, item in _strings(value):
        if isinstance(item, str):
            total += len(item.encode("utf-8", "surrogatepass")) + 3
        elif isinstance(item, dict):
            total += 2 + sum(len(k) + 3 for k in item)
        elif isinstance(item, list):
            total += 2
        else:
            total += len(repr(item)) + 1
    return total


def _shown(value: Any) -> str:
    if isinstance(value, bytes):
        return repr(value[:300])
    return json.dumps(_clipped(value), ensure_ascii=True)[:300]


def _clipped(value: Any, depth: int = 0) -> Any:
    """`value` with what nests deeper than 8 levels shown as "…" (a nest may be 2,000 deep)."""
    if not isinstance(value, dict | list):
        return value if not isinstance(value, float) or math.isfinite(value) else repr(value)
    if depth == 8:
        return "…"
    if isinstance(value, dict):
        return {k: _clipped(v, depth + 1) for k, v in value.items()}
    return [_clipped(v, depth + 1) for v in value]


SPEC = LoopSpec()


def _unsound(response: ModelResponse | None, deltas: list[Any], error: BaseException | None) -> str:
    """Why a run could not keep what an input gave, or "" when it can."""
    try:
        msgspec.json.encode(deltas)
        if isinstance(error, DecodeError):
            msgspec.json.encode([error.path, error.message, str(error)])
            error = ProviderError("malformed_response", str(error), retryable=False)
        if isinstance(error, ProviderError):
            wait = error.retry_after
            if wait is not None and not (math.isfinite(wait) and wait >= 0):
                return f"retry_after {wait!r}"
        loop = Loop(SPEC)
        [ask] = loop.start("go", now=0.0)
        if response is not None:
            loop.send(ModelReplied(ask.id, response, now=1.0))
        elif isinstance(error, ProviderError):
            failed = ModelFailed(ask.id, error.message, error.retryable, error.kind, wait, now=1.0)
            loop.send(failed)
        Loop.load(SPEC, loop.dump())
    except (TurnstileError, TypeError, ValueError, RecursionError, msgspec.MsgspecError) as err:
        return f"a run cannot keep it: {type(err).__name__}: {err}"
    return ""


def _through(way: str, wire: Wire, item: Any, rng: random.Random) -> tuple[Any, list[Any]]:
    deltas: list[Any] = []
    if way == "decode":
        return wire.decode(item), deltas
    if way == "stream":
        accumulator = wire.accumulator()
        for event in item:
            deltas += accumulator.feed(event)
        return accumulator.result(), deltas
    if way == "bytes-body":
        return read_body(wire, item), deltas
    reader = StreamReader(wire, deltas.append)
    start = 0
    while start < len(item):
        end = start + rng.choice([1, 3, 7, 64, 1024, 1 << 20])
        reader.feed(item[start:end])
        start = end
    return reader.result(), deltas


def _input(mutator: Mutator, seed: Seed, pool: list[Seed]) -> tuple[str, Any]:
    rng = mutator.rng
    rounds = rng.choice([1, 1, 2, 3])
    if rng.random() < 0.25:
        if seed.sse is not None:
            data = seed.sse.encode()
            way = "bytes-stream"
        else:
            data = json.dumps(seed.body, ensure_ascii=rng.random() < 0.5).encode()
            way = "bytes-body"
        for _ in range(rounds):
            data = mutator.raw(data)
        return way, data
    if seed.events is not None:
        others = [e for s in pool if s.provider == seed.provider for e in (s.events or [])]
        events = seed.events
        for _ in range(rounds):
            events = mutator.events(events, others)
        return "stream", events
    body = seed.body
    for _ in range(rounds):
        body = mutator.tree(body)
    return "decode", body


def run(inputs: int, seed: int = 1) -> Report:
    """Send `inputs` mutated replies through the codecs; the report counts what happened."""
    rng = random.Random(seed)
    pool = seeds()
    mutator = Mutator(rng, pool)
    report = Report()
    for _ in range(inputs):
        origin = rng.choice(pool)
        way, item = _input(mutator, origin, pool)
        if rng.randrange(HUGE_EVERY) == 0:
            item = mutator.huge(item)
            report.huge += 1
        size = len(item) if isinstance(item, bytes) else _size(item)
        wire = CLIENTS[origin.provider].wire
        chunking = random.Random(rng.random())
        report.inputs += 1
        report.ways[way] += 1
        elapsed, outcome, problem = _attempt(way, wire, item, chunking)
        if elapsed > LIMIT_MS and size < SMALL:  # measured again: a pause is not the input's
            elapsed = min(elapsed, _attempt(way, wire, item, random.Random(0))[0])
            if elapsed > LIMIT_MS:
                problem = problem or f"took {elapsed:.0f} ms for {size:,} bytes"
        if elapsed > report.max_ms:
            report.max_ms, report.max_ms_bytes = elapsed, size
        head, _, kind = outcome.partition(": ")
        report.outcomes[head] += 1
        if head.startswith("ProviderError"):
            report.kinds[kind] += 1
        if problem:
            report.failures.append(Failure(way, origin.name, problem, _shown(item)))
    return report


def _attempt(way: str, wire: Wire, item: Any, rng: random.Random) -> tuple[float, str, str]:
    """(ms, outcome, problem) of one input; problem is "" when it passed."""
    response, deltas, error = None, [], None
    start = time.perf_counter()
    try:
        response, deltas = _through(way, wire, item, rng)
        outcome = "reply"
    except DecodeError as err:
        error, outcome = err, "DecodeError"
    except ProviderError as err:
        error, outcome = (
            err,
            f"ProviderError ({'retryable' if err.retryable else 'final'}): {err.kind}",
        )
    except Exception as err:  # what this script is here to find
        elapsed = (time.perf_counter() - start) * 1000
        return elapsed, f"untyped: {type(err).__name__}", f"{type(err).__name__}: {err}"[:300]
    elapsed = (time.perf_counter() - start) * 1000
    return elapsed, outcome, _unsound(response, deltas, error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--inputs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = run(args.inputs, args.seed)
    print(f"bench.fuzz · seed {args.seed} · {time.perf_counter() - start:.0f} s")
    print("\n".join(report.lines()))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
