"""The web example, driven as an ASGI server would drive it (no server, no network)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import msgspec
from turnstile.executors import RunFinished, Update

from .app import app


def get(path: str, query: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "query_string": query}
    asyncio.run(app(scope, receive, send))
    start, *bodies = sent
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m["body"] for m in bodies)


def events(body: bytes) -> list[tuple[str, Update]]:
    found = []
    for block in body.decode().strip().split("\n\n"):
        kind, data = (line.split(": ", 1)[1] for line in block.split("\n"))
        found.append((kind, msgspec.json.decode(data, type=Update)))
    return found


def test_the_page_listens_for_the_run_s_events() -> None:
    status, headers, body = get("/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'new EventSource("/ask?q="' in body


def test_ask_streams_the_run_as_server_sent_events(monkeypatch: Any) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    status, headers, body = get("/ask", "q=北京和上海哪个更暖和?&user=ada".encode())
    assert status == 200 and headers["content-type"] == "text/event-stream"
    got = events(body)
    assert all(kind == msgspec.json.decode(msgspec.json.encode(u))["type"] for kind, u in got)
    assert [kind for kind, _ in got] == [
        "model_call_started",
        "text_delta",
        "model_call_finished",
        *["tool_call_started"] * 2,  # the two calls run at once
        *["tool_call_finished"] * 2,
        "model_call_started",
        "text_delta",
        "model_call_finished",
        "run_finished",
    ]
    finished = got[-1][1]
    assert isinstance(finished, RunFinished)
    assert '"查询者":"ada"' in str(finished.output)  # the tool saw the request's user


def test_the_docs_show_this_example_s_own_code() -> None:
    page = (Path(__file__).parent.parent.parent / "docs" / "how-to" / "async.md").read_text()
    section = page.split("`examples/web/app.py` is a plain ASGI app", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    handler = re.search(r"^async def _ask.*?(?=\n\n\n)", snippet, re.S | re.M).group(0)  # type: ignore[union-attr]
    assert handler in (Path(__file__).parent / "app.py").read_text()
