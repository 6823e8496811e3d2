"""Server-side state, counted, not timed: the request bytes a 50-turn Responses run sends with
`store=True` (each request names the last response and carries only the new items), against the
same run without it (the whole history every time), both through the SDK to a scripted server.
"""

from __future__ import annotations

__all__ = ["bytes_sent", "rows"]

from typing import Any

from turnstile.providers import openai_responses

from .providers import MODEL, PROMPT, SYSTEM, TOOLS, Row

STORED_TURNS = 50


def bytes_sent(turns: int, **options: Any) -> int:
    """The request bytes of a `turns`-turn Responses run (a text and a call each turn, then an
    answer), through the SDK client to a scripted server, with the client's `options`."""
    import httpx2
    import openai
    from turnstile.core import Guards, LoopSpec
    from turnstile.executors import sync

    sent = [0]

    def serve(request: httpx2.Request) -> httpx2.Response:
        sent[0] += len(request.content)
        i = len(served)
        served.append(i)
        text = {"type": "output_text", "text": "我来帮您查询北京的实时天气。", "annotations": []}
        output: list[dict[str, Any]] = [
            {"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
             "content": [text]}
        ]  # fmt: skip
        if i < turns - 1:
            output.append({"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}",
                           "name": "get_weather", "arguments": f'{{"city":"城市{i}"}}',
                           "status": "completed"})  # fmt: skip
        body = {"id": f"resp_{i:05d}", "object": "response", "created_at": 0, "model": MODEL,
                "status": "completed", "output": output, "store": bool(options)}  # fmt: skip
        return httpx2.Response(200, json=body)

    served: list[int] = []
    http = httpx2.Client(transport=httpx2.MockTransport(serve), trust_env=False)
    sdk = openai.OpenAI(api_key="k", base_url="https://bench.invalid/v1", http_client=http)
    client = openai_responses.Client(sdk, model=MODEL, **options)
    spec = LoopSpec(system=SYSTEM, tools=TOOLS, guards=Guards(max_turns=turns + 1))

    def get_weather(city: str) -> str:
        """查询城市的实时天气"""
        return '{"温度":26,"天气":"多云","湿度":45}'

    run = sync.run(spec, PROMPT, model=client, tools=[get_weather])
    assert len(served) == turns, run.stop_reason
    return sent[0]


def rows() -> list[Row]:
    """Bytes sent over one run with `store=True` and, the baseline, without it."""
    ours, whole = bytes_sent(STORED_TURNS, store=True), bytes_sent(STORED_TURNS)
    return [
        (
            "request bytes/run · openai-responses store=True",
            f"{STORED_TURNS} turns",
            f"{ours:,} B",
            f"whole history each request {whole:,} B → ×{ours / whole:.2g}",
            "no target; counted, not timed",
        )
    ]
