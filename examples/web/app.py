"""An asyncio web app (plain ASGI, as FastAPI and Starlette are) that runs the weather agent per
request and streams what it does to the page as server-sent events.

    uvicorn examples.web.app:app        # any ASGI server; then open http://127.0.0.1:8000

`GET /` is the page; `GET /ask?q=...` runs the agent under the app's own event loop (the async
executor, `aio.updates`) and sends each `Update` as an event named by its type, its JSON as
data. The user the app knows the request by reaches the tool as its run's `deps`, never the
model. With `OPENAI_API_KEY` set the agent asks OpenAI (streaming, so text arrives as deltas);
without it, a scripted model answers, so the example runs offline. A client that goes away
makes `send` fail, which leaves the `updates` block and so cancels the run (it finishes
`cancelled`, its state valid).
"""

from __future__ import annotations

__all__ = ["app", "model_for", "sse"]

import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import msgspec
from turnstile.core import LoopSpec, ModelRequest, ToolContext, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage, text_of
from turnstile.executors import ScriptedModel, Update, aio

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

WEATHER = {"北京": {"温度": 26, "天气": "多云"}, "上海": {"温度": 29, "天气": "晴"}}


class User(msgspec.Struct, frozen=True):
    name: str


@tool
async def get_weather(city: str, context: ToolContext[User]) -> dict[str, object]:
    """查询城市的实时天气"""
    if city not in WEATHER:
        raise LookupError(f"没有 {city} 的天气数据; 可查询: {', '.join(WEATHER)}")
    return {**WEATHER[city], "查询者": context.deps.name}


SPEC = LoopSpec(system="你是一个天气助手。", tools=(get_weather.spec,), max_tokens=1024)


def _scripted(request: ModelRequest) -> ModelResponse:
    """Offline: asks for both cities, then compares what came back."""
    if len(request.messages) == 1:
        calls = [ToolCall(f"c{i}", "get_weather", {"city": c}) for i, c in enumerate(WEATHER)]
        return ModelResponse([Text("我查一下。"), *calls], ModelStop.tool_use, Usage(50, 20))
    results = text_of(request.messages[-1].results[-1].content)  # type: ignore[union-attr]
    return ModelResponse([Text(f"上海更暖和({results})。")], ModelStop.end_turn, Usage(90, 20))


def model_for(environ: dict[str, str]) -> Any:
    """OpenAI's Chat Completions, streamed, when a key is set; else the scripted model."""
    if not environ.get("OPENAI_API_KEY"):
        return ScriptedModel(_scripted)
    import openai
    from turnstile.providers import openai_chat

    return openai_chat.Client(openai.AsyncOpenAI(), model="gpt-5.1", stream=True)


def sse(update: Update) -> bytes:
    """One update as a server-sent event: its type names the event, its JSON is the data."""
    data = msgspec.json.encode(update)
    kind = msgspec.json.decode(data, type=dict[str, Any])["type"]
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), data)


PAGE = """<!doctype html><meta charset="utf-8"><title>turnstile</title>
<form id="f"><input name="q" value="北京和上海哪个更暖和?" size="40"><button>ask</button></form>
<pre id="log"></pre><p id="answer"></p>
<script>
const log = document.getElementById("log"), answer = document.getElementById("answer");
document.getElementById("f").onsubmit = (e) => {
  e.preventDefault(); log.textContent = ""; answer.textContent = "";
  const q = new FormData(e.target).get("q");
  const events = new EventSource("/ask?q=" + encodeURIComponent(q));
  const on = (kind, show) => events.addEventListener(kind, (m) => show(JSON.parse(m.data)));
  on("model_call_started", () => { answer.textContent = ""; });
  on("text_delta", (u) => { answer.textContent += u.text; });  // streamed replies
  on("model_call_finished", (u) => { answer.textContent = u.text; });
  for (const kind of ["tool_call_started", "tool_call_finished", "model_retry"])
    on(kind, (u) => { log.textContent += kind + " " + JSON.stringify(u) + "\\n"; });
  on("run_finished", () => events.close());
};
</script>
"""


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app: the page, and one agent run per `/ask`."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/":
        await _respond(send, 200, "text/html; charset=utf-8", PAGE.encode())
    elif scope["path"] == "/ask":
        query = parse_qs(scope.get("query_string", b"").decode())
        await _ask(send, query.get("q", [""])[0], User(query.get("user", ["guest"])[0]))
    else:
        await _respond(send, 404, "text/plain", b"not found")


async def _ask(send: Send, question: str, user: User) -> None:
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    model = model_for(dict(os.environ))
    async with aio.updates(SPEC, question, model=model, tools=[get_weather], deps=user) as run:
        async for update in run:
            await send({"type": "http.response.body", "body": sse(update), "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _respond(send: Send, status: int, kind: str, body: bytes) -> None:
    headers = [(b"content-type", kind.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
