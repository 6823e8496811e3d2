"""The request of each model call (`core/_ask.py`): what it sends of the conversation, its cache
key, and the model it goes to."""

from __future__ import annotations

from itertools import pairwise

from turnstile.core import CallModel, Compaction, Guards, Loop, LoopSpec, ModelFailed, ToolSpec
from turnstile.core.messages import Usage, UserMessage
from turnstile.core.request import CachePolicy, Purpose

from tests.core._drive import Driver, call, spec


def _first_request(loop_spec: LoopSpec, prompt: str = "hi", now: float = 0.0) -> CallModel:
    [ask] = Loop(loop_spec).start(prompt, now)
    assert type(ask) is CallModel
    return ask


def test_a_conversation_s_cache_key_holds_whatever_the_clock_and_the_tools() -> None:
    """A recording and its replay, or a run and its resume on another machine, hit one cache."""
    early = _first_request(LoopSpec(), "weather in 北京", now=0.0)
    late = _first_request(LoopSpec(), "weather in 北京", now=9_999.5)
    with_tools = _first_request(LoopSpec(tools=(ToolSpec("search"),)), "weather in 北京")
    keys = {ask.request.cache_key for ask in (early, late, with_tools)}
    assert len(keys) == 1 and next(iter(keys)).startswith("turnstile-")


def test_another_conversation_gets_another_cache_key() -> None:
    one = _first_request(LoopSpec(), "weather in 北京").request.cache_key
    other = _first_request(LoopSpec(), "weather in 上海").request.cache_key
    assert one != other


def test_a_key_of_the_user_s_own_is_sent_and_no_key_without_caching() -> None:
    own = _first_request(LoopSpec(cache=CachePolicy(key="my-app"))).request
    assert own.cache_key == "my-app" and own.cache == CachePolicy(key="my-app")
    off = _first_request(LoopSpec(cache=CachePolicy(enabled=False, key="my-app"))).request
    assert off.cache is None and off.cache_key is None


def test_every_request_of_a_run_carries_the_same_key() -> None:
    d = Driver(spec("search"))
    [first] = d.start("find it")
    d.reply(call("s1", "search", q="it"))
    [second] = d.result("s1", "found")
    assert type(first) is CallModel and type(second) is CallModel
    assert first.request.cache_key == second.request.cache_key is not None


def test_a_request_sends_the_system_prompt_tools_and_whole_conversation() -> None:
    d = Driver(spec("search", system="Be brief.", max_tokens=256))
    d.start("find it")
    d.reply(call("s1", "search", q="it"))
    [ask] = d.result("s1", "found")
    request = ask.request
    assert request.system == "Be brief." and request.max_tokens == 256
    assert [t.name for t in request.tools] == ["search"] and request.purpose is Purpose.turn
    assert list(request.messages) == list(d.state.messages)
    assert request.messages[0] == UserMessage("find it")


def test_the_model_is_the_spec_s_first_until_its_retries_run_out_then_the_next() -> None:
    d = Driver(spec(models=("primary", "fallback"), guards=Guards(max_model_retries=0)))
    [ask] = d.start()
    assert ask.request.model == "primary"
    [again] = d.send(ModelFailed(ask.id, "overloaded", retryable=True, now=1.0))
    assert type(again) is CallModel and again.request.model == "fallback"


def test_without_models_the_request_names_none_and_the_client_chooses() -> None:
    assert _first_request(LoopSpec()).request.model is None


def test_once_compacted_each_request_begins_as_the_one_before() -> None:
    """What a compaction made of the older turns is kept between requests and only extended, so
    a provider's cache of the requests' start still holds."""
    window = Guards(context_window=1_000, reserve_tokens=100, max_turns=None, deadline_s=None)
    d = Driver(spec("read", guards=window, compaction=Compaction(strategy="drop_turns")))
    d.start("read everything")
    sent: list[tuple[int, list[object]]] = []  # (compactions made, what the request sent)
    for i in range(12):
        d.reply(call(f"c{i}", "read", n=i), usage=Usage())
        [ask] = d.result(f"c{i}", "x" * 300)
        assert type(ask) is CallModel
        if d.state.compactions:
            sent.append((len(d.state.compactions), list(ask.request.messages)))
    kept = [(a, b) for (n, a), (m, b) in pairwise(sent) if n == m]
    assert kept, "no two requests under the same compaction"
    for before, after in kept:
        assert after[: len(before)] == before and len(after) > len(before)
    assert all(len(messages) < len(d.state.messages) for _, messages in sent)
