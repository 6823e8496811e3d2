"""A summary request (compaction) begins as the turns' requests did, in every format, so a
prompt cache serves its prefix; it only forbids calling the tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from turnstile.core import (
    CallModel,
    Compaction,
    Guards,
    Loop,
    LoopSpec,
    ModelReplied,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import ModelResponse, ModelStop, ToolCall
from turnstile.core.request import Purpose
from turnstile.providers import anthropic_messages, openai_chat, openai_responses

TOOL = ToolSpec(
    "read", "Read file n.", {"type": "object", "properties": {"n": {"type": "integer"}}}
)


def requests() -> list[CallModel]:
    guards = Guards(context_window=1_000, reserve_tokens=0, max_repeated_calls=None)
    spec = LoopSpec(
        system="Read files.",
        tools=(TOOL,),
        guards=guards,
        compaction=Compaction(strategy="summarize", keep_turns=1),
    )
    loop = Loop(spec)
    asked = loop.start("read them all", 0.0)
    made: list[CallModel] = []
    for i in range(1, 10):
        [ask] = asked
        assert isinstance(ask, CallModel)
        made.append(ask)
        if ask.request.purpose is Purpose.summarize:
            return made
        call = ToolCall(f"c{i}", "read", {"n": i})
        loop.send(ModelReplied(ask.id, ModelResponse([call], ModelStop.tool_use), now=float(i)))
        asked = loop.send(ToolReturned(f"c{i}", "x" * 900, now=i + 0.5))
    raise AssertionError("the window never filled")


@pytest.mark.parametrize(
    ("encode", "tools_key", "messages_key"),
    [
        (anthropic_messages.encode, "tools", "messages"),
        (openai_chat.encode, "tools", "messages"),
        (openai_responses.encode, "tools", "input"),
    ],
)
def test_a_summary_request_repeats_the_turn_s_prefix_and_forbids_tools(
    encode: Callable[..., dict[str, Any]], tools_key: str, messages_key: str
) -> None:
    *_, turn, summary = requests()
    before = encode(turn.request, model="m")
    after = encode(summary.request, model="m")
    assert after[tools_key] == before[tools_key]
    assert "tool_choice" not in before and after["tool_choice"] in ("none", {"type": "none"})
    sent, asked = before[messages_key], after[messages_key]
    assert asked[: len(sent) - 1] == sent[: len(sent) - 1]  # the last may carry a breakpoint
