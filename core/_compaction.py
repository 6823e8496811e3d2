"""Compaction: what the loop sends once a conversation outgrows its context window.

The ledger keeps every message; only the requests change. When the next request would be larger
than `threshold` of the window, the loop compacts the oldest turns by the spec's strategy until
the request is about `target` of the window, keeping the newest `keep_turns` turns whole:

    clear_tool_results  old tool results are sent with their content cleared
    drop_turns          old turns are left out, and the prompt notes how many messages
    summarize           old turns are left out and a summary, written by the model in one more
                        call (`Purpose.summarize`), is added to the prompt

A cut falls only where a turn begins after a round's results, so every tool call is sent with
its result and every reply with its thinking blocks and signatures as they came. Each
compaction is kept in the state (`Compacted`), and what is sent is derived from the last one,
so a dumped state or a replayed log sends the same. A conversation that no cut can bring under
the context guard's budget still stops on it.
"""

from __future__ import annotations

__all__ = ["CLEARED", "DEFAULT_SUMMARY_PROMPT", "Compaction", "compacted", "plan", "rewrite"]

from collections.abc import Sequence

import msgspec

from ._errors import InvalidSpec
from ._fields import check_fields
from ._guards import estimate_tokens, message_tokens, part_tokens
from ._messages import AssistantMessage, Message, Text, ToolResult, ToolResults, UserMessage
from ._state import Compacted, Strategy

CLEARED = "[cleared by turnstile to fit the context window]"
"""What a cleared tool result says instead of its content."""

DEFAULT_SUMMARY_PROMPT = (
    "Your context window is nearly full, and the older part of this conversation will be "
    "replaced by a summary you write now. Summarize it for yourself: the task, what you did and "
    "found (facts, names, numbers, paths), what failed, and what is left to do. Leave out "
    "nothing you still need. Do not call any tool."
)


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """The policy: compact by `strategy` once the next request would exceed `threshold` of
    `Guards.context_window`, down to about `target` of it, never touching the newest
    `keep_turns` turns; `prompt` asks for a summary."""

    strategy: Strategy
    threshold: float = 0.8
    target: float = 0.5
    keep_turns: int = 2
    prompt: str = DEFAULT_SUMMARY_PROMPT

    def __post_init__(self) -> None:
        check_fields(self)
        if not 0.0 < self.target <= self.threshold <= 1.0:
            raise InvalidSpec(
                "0 < target <= threshold <= 1 (fractions of the window)", field="Compaction.target"
            )
        if self.keep_turns < 1:
            raise InvalidSpec(
                "must be 1 or more: the newest turn is kept", field="Compaction.keep_turns"
            )
        if not self.prompt.strip():
            raise InvalidSpec(
                "cannot be empty: the summary request sends it", field="Compaction.prompt"
            )


def _first_reply(messages: Sequence[Message]) -> int | None:
    for i, message in enumerate(messages):
        if type(message) is AssistantMessage:
            return i
    return None


def _freed(strategy: Strategy, messages: Sequence[Message]) -> int:
    """What compacting `messages` takes out of a request, in estimated tokens."""
    if strategy != "clear_tool_results":
        return sum(message_tokens(m) for m in messages)
    cleared = estimate_tokens(CLEARED)
    return sum(
        part_tokens(r.content) - cleared
        for m in messages
        if type(m) is ToolResults
        for r in m.results
        if r.content != CLEARED
    )


def plan(
    policy: Compaction,
    messages: Sequence[Message],
    last: Compacted | None,
    tokens: int,
    window: int,
    budget: int,
) -> int | None:
    """Where to cut (the index of the first message sent as it is), or None: the request
    (`tokens`) is within the threshold and the context guard's `budget`, or no cut is left
    that would free anything."""
    if tokens <= min(policy.threshold * window, budget):
        return None
    head = _first_reply(messages) if last is None else last.head
    if head is None:
        return None
    start = head if last is None else last.upto
    cuts = [
        k
        for k in range(start + 1, len(messages))
        if type(messages[k]) is AssistantMessage and type(messages[k - 1]) is ToolResults
    ]
    cuts = cuts[: len(cuts) - policy.keep_turns + 1]
    # the target, lowered as far as the guard's budget sits below the threshold
    goal = tokens - min(policy.target * window, budget * policy.target / policy.threshold)
    freed, at, chosen = 0, start, None
    for k in cuts:
        freed += _freed(policy.strategy, messages[at:k])
        at, chosen = k, k
        if freed >= goal:
            break
    return chosen if chosen is not None and freed > 0 else None


def _note(record: Compacted) -> str | None:
    if record.strategy == "clear_tool_results":
        return None
    if record.summary is None:
        return (
            f"[turnstile: the {record.upto - record.head} messages after this one were left "
            "out to fit the context window]"
        )
    return (
        "[turnstile: the older part of this conversation was left out to fit the context "
        f"window; here is its summary]\n{record.summary}"
    )


def compacted(
    strategy: Strategy,
    messages: Sequence[Message],
    last: Compacted | None,
    upto: int,
    tokens: int,
    summary: str | None = None,
    command_id: str | None = None,
) -> Compacted:
    """The record of compacting `messages` up to `upto`, after `last`, from a request of
    `tokens`."""
    head = _first_reply(messages) if last is None else last.head
    assert head is not None, "a cut needs a first reply"
    start = head if last is None else last.upto
    record = Compacted(strategy, len(messages), head, upto, tokens, 0, summary, command_id)
    old = None if last is None else _note(last)
    new = _note(record)
    after = tokens - _freed(strategy, messages[start:upto])
    after += (0 if new is None else estimate_tokens(new)) - (
        0 if old is None else estimate_tokens(old)
    )
    return msgspec.structs.replace(record, tokens_after=max(after, 0))


def _noted(message: UserMessage, note: str) -> UserMessage:
    content = message.content
    if isinstance(content, str):
        return UserMessage(f"{content}\n\n{note}")
    return UserMessage([*content, Text(note)])


def _cleared(message: ToolResults) -> ToolResults:
    return ToolResults([ToolResult(r.call_id, CLEARED, r.is_error) for r in message.results])


def rewrite(messages: Sequence[Message], last: Compacted, n: int) -> list[Message]:
    """What a request sends of the ledger's first `n` messages after the compaction `last`."""
    if last.strategy == "clear_tool_results":
        return [
            _cleared(m) if i < last.upto and type(m) is ToolResults else m
            for i, m in enumerate(messages[:n])
        ]
    head = list(messages[: last.head])
    note = _note(last)
    assert note is not None
    for i in range(len(head) - 1, -1, -1):
        message = head[i]
        if type(message) is UserMessage:
            head[i] = _noted(message, note)
            break
    else:
        head.append(UserMessage(note))
    return head + list(messages[last.upto : n])
