"""The fuzz campaign's inputs (`bench.fuzz`): the seeds, every reply recorded in `fixtures/` with
an error body of each format, and the `Mutator` that changes them."""

from __future__ import annotations

__all__ = ["HUGE", "HUGE_EVERY", "Mutator", "Seed", "seeds", "strings"]

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnstile.providers._sse import events_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
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


def strings(value: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
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
                for key, value in strings(body):
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
