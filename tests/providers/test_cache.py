"""The encoding cache, through each codec: a cached body is the uncached one."""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

import pytest
from turnstile.core import ModelRequest
from turnstile.core.messages import AssistantMessage, History, Message, Text, UserMessage
from turnstile.providers import WireCache, anthropic_messages, openai_chat, openai_responses

CODECS = [anthropic_messages, openai_chat, openai_responses]


def whole_body(codec: ModuleType, messages: list[Message]) -> dict[str, Any]:
    """The body of a plain list of messages, which is never cached: the reference."""
    return codec.encode(ModelRequest("s", list(messages), (), 100), model="m")  # type: ignore[no-any-return]


def view_body(
    codec: ModuleType, ledger: list[Message], n: int, cache: WireCache | None
) -> dict[str, Any]:
    """The body of the first `n` messages of `ledger` as a client sends them (a `History`)."""
    request = ModelRequest("s", History(ledger, n), (), 100)
    return codec.encode(request, model="m", cache=cache)  # type: ignore[no-any-return]


def entries(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["input"] if "input" in body else body["messages"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[1])
def test_a_new_history_never_gets_an_encoding_of_one_that_died(codec: ModuleType) -> None:
    """New lists soon take the addresses of dead ones; ending with the same reply must not
    make one history look like the continuation of another."""
    reply = AssistantMessage([Text("同一个回答")])
    cache = WireCache()
    for i in range(200):
        ledger: list[Message] = [UserMessage(f"question {i}"), reply]
        assert view_body(codec, ledger, 2, cache) == whole_body(codec, ledger)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[1])
def test_histories_sharing_their_last_message_keep_their_own_beginnings(codec: ModuleType) -> None:
    shared = AssistantMessage([Text("同一个回答")])
    first: list[Message] = [UserMessage("one"), shared]
    second: list[Message] = [UserMessage("two"), shared]
    cache = WireCache()
    assert view_body(codec, first, 2, cache) == whole_body(codec, first)
    assert view_body(codec, second, 2, cache) == whole_body(codec, second)
    assert view_body(codec, first, 2, cache) == whole_body(codec, first)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.__name__.rsplit(".", 1)[1])
def test_only_a_cache_keeps_entries_between_calls(codec: ModuleType) -> None:
    ledger: list[Message] = [UserMessage("q"), AssistantMessage([Text("a")])]
    cache = WireCache()
    before = entries(view_body(codec, ledger, 2, cache))
    ledger.append(UserMessage("next"))
    assert entries(view_body(codec, ledger, 3, cache))[-2] is before[-1]
    uncached = entries(view_body(codec, ledger, 2, None))
    assert entries(view_body(codec, ledger, 3, None))[-2] is not uncached[-1]
    assert entries(view_body(codec, ledger, 3, WireCache()))[-2] is not before[-1]


def test_one_cache_serves_every_codec_each_with_its_own_wire_form() -> None:
    ledger: list[Message] = [UserMessage("q"), AssistantMessage([Text("a")])]
    cache = WireCache()
    for n in (1, 2):
        for codec in CODECS:
            assert view_body(codec, ledger, n, cache) == whole_body(codec, ledger[:n])


def test_threads_encoding_one_history_at_once_leave_it_one_entry() -> None:
    """Each thread but the first folds the history whole; keeping all their copies would push
    other conversations out of the cache."""
    written: list[Message] = []

    def fold(wire: list[dict[str, Any]], messages: Any) -> None:
        for message in messages:
            time.sleep(0.01)  # long enough for the threads to overlap
            written.append(message)
            wire.append({"message": id(message)})

    cache = WireCache(size=2)
    first: list[Message] = [UserMessage("a")]
    cache.wire(fold, History(first))
    other: list[Message] = [UserMessage("b"), AssistantMessage([Text("c")]), UserMessage("d")]
    threads = [threading.Thread(target=cache.wire, args=(fold, History(other))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written.clear()
    first.append(AssistantMessage([Text("e")]))
    cache.wire(fold, History(first))
    assert written == [first[1]], "the first conversation was pushed out of the cache"
