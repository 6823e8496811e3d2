"""The codecs' shared encoding cache, through each codec: a cached body is the uncached one."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from turnstile.core import AssistantMessage, History, Message, ModelRequest, Text, UserMessage
from turnstile.providers import anthropic_messages, openai_chat, openai_responses

CODECS = [anthropic_messages, openai_chat, openai_responses]


def whole_body(codec: ModuleType, messages: list[Message]) -> dict[str, Any]:
    """The body of a plain list of messages, which is never cached: the reference."""
    return codec.encode(ModelRequest("s", list(messages), (), 100), model="m")  # type: ignore[no-any-return]


def view_body(codec: ModuleType, ledger: list[Message], n: int) -> dict[str, Any]:
    """The body of the first `n` messages of `ledger` as the loop sends them (a `History`)."""
    return codec.encode(ModelRequest("s", History(ledger, n), (), 100), model="m")  # type: ignore[no-any-return]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[1])
def test_a_new_history_never_gets_an_encoding_of_one_that_died(codec: ModuleType) -> None:
    """New lists soon take the addresses of dead ones; ending with the same reply must not
    make one history look like the continuation of another."""
    reply = AssistantMessage([Text("同一个回答")])
    for i in range(200):
        ledger: list[Message] = [UserMessage(f"question {i}"), reply]
        assert view_body(codec, ledger, 2) == whole_body(codec, ledger)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[1])
def test_histories_sharing_their_last_message_keep_their_own_beginnings(codec: ModuleType) -> None:
    shared = AssistantMessage([Text("同一个回答")])
    first: list[Message] = [UserMessage("one"), shared]
    second: list[Message] = [UserMessage("two"), shared]
    assert view_body(codec, first, 2) == whole_body(codec, first)
    assert view_body(codec, second, 2) == whole_body(codec, second)
    assert view_body(codec, first, 2) == whole_body(codec, first)
