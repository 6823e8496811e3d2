"""`validate_history`: the seeds' trace checks, naming every offending position and call id."""

from __future__ import annotations

import pytest
from turnstile.core import InvalidHistory
from turnstile.core.messages import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
    validate_history,
)

Q = UserMessage("q")


def calls(*ids: str) -> AssistantMessage:
    return AssistantMessage([ToolCall(i, "t", {}) for i in ids])


def results(*ids: str) -> ToolResults:
    return ToolResults([ToolResult(i, "ok") for i in ids])


def test_a_valid_ledger_passes() -> None:
    validate_history(
        [Q, calls("a", "b"), results("b", "a"), AssistantMessage([]), UserMessage("x")]
    )


@pytest.mark.parametrize(
    ("messages", "call_ids", "positions", "text"),
    [
        ([Q, calls("a", "b"), results("a")], ["b"], [2], "has no result"),
        ([Q, calls("a"), results("a", "a")], ["a"], [2], "more than one result"),
        ([Q, calls("a"), results("a", "z")], ["z"], [2], "answers no call"),
        ([Q, calls("a"), UserMessage("more")], ["a"], [2], "no result before the next message"),
        ([Q, calls("a")], ["a"], [1], "has no result"),
        ([Q, calls("a", "a"), results("a")], ["a"], [1], "not unique"),
        ([calls("a")], ["a"], [0, 0], "starts with an assistant message"),
        ([Q, UserMessage("again")], [], [1], "two user messages in a row"),
        ([Q, results("a")], ["a"], [1, 1], "do not follow a reply"),
        ([UserMessage("")], [], [0], "empty"),
    ],
)
def test_each_broken_rule_is_named(
    messages: list, call_ids: list[str], positions: list[int], text: str
) -> None:
    with pytest.raises(InvalidHistory, match=text) as e:
        validate_history(messages)
    assert e.value.call_ids == call_ids
    assert e.value.positions == positions


def test_a_paused_reply_and_its_continuation_are_one_turn() -> None:
    paused = AssistantMessage([ToolCall("x", "search", {})])
    validate_history([Q, AssistantMessage([]), calls("a"), results("a")])
    with pytest.raises(InvalidHistory, match="no result before the next message"):
        validate_history([Q, paused, AssistantMessage([])])


def test_call_ids_need_only_be_unique_within_a_reply() -> None:
    validate_history([Q, calls("a"), results("a"), calls("a"), results("a")])


def test_pending_calls_are_allowed_only_when_asked() -> None:
    validate_history([Q, calls("a")], allow_pending=True)
