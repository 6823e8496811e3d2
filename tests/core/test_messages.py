"""Content beyond text: images, documents and audio in user messages and tool results,
instructions mid-conversation, a prefilled reply; plain data through the loop and its dumps."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import Loop, LoopSpec, ToolReturned, tool
from turnstile.core._guards import IMAGE_TOKENS, message_tokens
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Opaque,
    Text,
    ToolResult,
    ToolResults,
    UserMessage,
    history_problems,
)
from turnstile.executors import invoke

from tests.core._drive import Driver, call, spec

PNG = Image(media_type="image/png", data=b"\x89PNG\r\n\x1a\n")
PDF = Document(media_type="application/pdf", data=b"%PDF-1.7 " * 1000, name="report.pdf")


def test_a_media_part_comes_from_exactly_one_place() -> None:
    for bad in ({}, {"url": "https://x/a.png", "file_id": "file_1"}, {"data": b"x"}):
        with pytest.raises(ValueError, match="image"):
            Image(**bad)
    with pytest.raises(msgspec.ValidationError, match="give one of data, url, file_id"):
        msgspec.json.decode(b'{"type": "document"}', type=Document)
    assert Image(url="https://x/a.png").url and Document(file_id="file_1").file_id


def test_a_conversation_with_parts_runs_dumps_and_loads() -> None:
    d = Driver(spec("look"))
    prompt = [
        Instructions("Answer in French.", role="developer"),
        UserMessage([Text("What is in these?"), PNG, PDF, Audio(b"RIFF", "audio/wav")]),
    ]
    d.start(prompt)
    d.reply(call("a", "look"))
    d.result("a", [Text("a chart"), Image(url="https://x/chart.png")])
    d.reply("Un graphique.")
    loop = Loop.load(d.loop.spec, d.loop.dump())
    assert loop.state.messages == d.state.messages
    [results] = [m for m in loop.state.messages if type(m) is ToolResults]
    assert results.results[0].content[1] == Image(url="https://x/chart.png")
    assert Loop.replay(d.loop.spec, d.state.events).dump() == d.loop.dump()


def test_a_tool_returning_images_gives_parts_and_the_rest_as_text() -> None:
    @tool
    def chart(title: str) -> list[object]:
        """Draw a chart."""
        return [f"chart of {title}", PNG, {"points": 3}]

    outcome = invoke(chart, {"title": "sales"})
    assert outcome.content == [Text("chart of sales"), PNG, Text('{"points":3}')]
    assert invoke(tool(lambda: PNG), {}).content == [PNG]


def test_instructions_may_come_anywhere_but_between_calls_and_results() -> None:
    ask = UserMessage("hi")
    reply = AssistantMessage([Text("calling"), call("a", "t")])
    ok = [Instructions("be brief"), ask, Instructions("be kind"), reply]
    assert history_problems([*ok, ToolResults([ToolResult("a", "x")])]) == []
    problems = history_problems([*ok, Instructions("no"), ToolResults([ToolResult("a", "x")])])
    assert next(p.message for p in problems) == "tool call has no result before the next message"
    assert [p.message for p in history_problems([Instructions("")])] == ["instructions are empty"]


def test_a_prompt_may_end_on_a_prefilled_reply_of_text() -> None:
    d = Driver(spec())
    [ask] = d.start([UserMessage("Say a JSON list"), AssistantMessage([Text("[")])])
    assert ask.request.messages[-1] == AssistantMessage([Text("[")])
    d.reply("1, 2]")
    assert d.state.stop_reason == "completed"


def test_parts_count_towards_the_context_estimate() -> None:
    assert message_tokens(UserMessage([PNG])) == IMAGE_TOKENS
    assert message_tokens(UserMessage([PDF])) >= IMAGE_TOKENS
    text_doc = Document(media_type="text/plain", data=b"x" * 3000)
    assert message_tokens(UserMessage([text_doc])) == 1000
    opaque = Opaque("anthropic_messages", {"type": "web_search_tool_result", "content": []})
    assert message_tokens(AssistantMessage([opaque])) > 0


def test_a_tool_result_with_broken_text_in_a_part_is_repaired_and_says_so() -> None:
    loop = Loop(LoopSpec(tools=spec("t").tools))
    [ask] = loop.start("go", 0.0)
    from turnstile.core import ModelReplied
    from turnstile.core.messages import ModelResponse, ModelStop, ToolCall

    loop.send(
        ModelReplied(ask.id, ModelResponse([ToolCall("a", "t", {})], ModelStop.tool_use), now=1)
    )
    loop.send(ToolReturned("a", [Text("bad \ud800 half")], now=2.0))
    [result] = loop.state.messages[-1].results
    assert result.content[0] == Text("bad \ufffd half")
    assert "not valid Unicode" in result.content[-1].text
