"""What a request asks of a provider beyond the conversation (which tools the model may call,
tools the provider runs, caching, the answer's shape) is plain data that writes as little JSON
as it can and reads back the same."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from turnstile.core import Loop, ModelRequest
from turnstile.core.messages import UserMessage
from turnstile.core.request import CachePolicy, OutputFormat, ServerTool, UseTool

from tests.core._drive import spec


def request(**fields: Any) -> ModelRequest:
    return ModelRequest(None, [UserMessage("hi")], (), 100, **fields)


def round_trip(value: ModelRequest) -> ModelRequest:
    return msgspec.json.decode(msgspec.json.encode(value), type=ModelRequest)


@pytest.mark.parametrize("choice", ["auto", "required", "none", UseTool("get_weather")])
def test_every_tool_choice_reads_back_as_it_was_written(choice: Any) -> None:
    assert round_trip(request(tool_choice=choice)).tool_choice == choice


def test_a_forced_tool_is_written_tagged_with_its_name() -> None:
    assert msgspec.json.encode(UseTool("get_weather")) == (
        b'{"type":"use_tool","name":"get_weather"}'
    )


@pytest.mark.parametrize("choice", [b'"maybe"', b'{"type":"use_tool"}', b"3"])
def test_a_tool_choice_that_is_none_of_them_does_not_read(choice: bytes) -> None:
    data = b'{"system":null,"messages":[],"tools":[],"max_tokens":1,"tool_choice":%s}' % choice
    with pytest.raises(msgspec.ValidationError, match="tool_choice"):
        msgspec.json.decode(data, type=ModelRequest)


def test_a_request_with_nothing_but_the_conversation_writes_nothing_else() -> None:
    assert msgspec.json.encode(request()) == (
        b'{"system":null,"messages":[{"type":"user","content":"hi"}],"tools":[],"max_tokens":100}'
    )


def test_a_request_of_every_option_reads_back_unchanged() -> None:
    full = request(
        tool_choice=UseTool("final_answer"),
        server_tools=(ServerTool("openai_responses", {"type": "web_search"}, position=0),),
        cache=CachePolicy(ttl="1h", key="conversation-1"),
        cache_key="conversation-1",
        output=OutputFormat("Answer", {"type": "object"}, strict=False),
        model="gpt-4o",
    )
    again = round_trip(full)
    assert msgspec.json.encode(again) == msgspec.json.encode(full)
    assert again.output == full.output and again.cache == full.cache


def test_a_server_tool_without_a_position_writes_none() -> None:
    """So a spec or request written before positions existed writes the same bytes."""
    tool = ServerTool("openai_responses", {"type": "web_search"})
    assert msgspec.json.encode(tool) == (
        b'{"format":"openai_responses","definition":{"type":"web_search"}}'
    )
    placed = msgspec.json.encode(msgspec.structs.replace(tool, position=0))
    assert msgspec.json.decode(placed, type=ServerTool).position == 0


def test_caching_is_on_by_default_and_its_defaults_write_nothing() -> None:
    policy = CachePolicy()
    assert (policy.enabled, policy.key, policy.ttl) == (True, None, "5m")
    assert msgspec.json.encode(policy) == b"{}"
    assert msgspec.json.encode(CachePolicy(enabled=False)) == b'{"enabled":false}'
    assert hash(policy) == hash(CachePolicy())  # frozen: a spec holding it stays hashable


def test_a_native_answer_s_shape_is_strict_unless_asked_otherwise() -> None:
    shape = OutputFormat("Answer", {"type": "object"})
    assert shape.strict
    assert msgspec.json.encode(shape) == b'{"name":"Answer","schema":{"type":"object"}}'


def test_the_spec_s_caching_and_server_tools_reach_every_request() -> None:
    web = ServerTool("openai_responses", {"type": "web_search"})
    loop = Loop(spec("t", cache=CachePolicy(ttl="1h"), server_tools=(web,)))
    [ask] = loop.start("hi", 0.0)
    assert ask.request.cache == CachePolicy(ttl="1h")
    assert list(ask.request.server_tools) == [web]
    assert ask.request.cache_key  # a key per conversation, for providers that take one
