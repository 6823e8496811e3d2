"""Each request of a 50-call run repeats what the provider may serve from its cache byte for byte:
for Anthropic, everything up to the previous request's last breakpoint; for OpenAI's formats,
the previous request whole, its messages or input items the start of the next one's. Bodies come
from each codec's public `encode`, as `bench.caching` drives the core `Loop` with scripted
replies; each is compared as JSON with sorted keys."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from turnstile.providers import anthropic_messages, openai_chat, openai_responses

from bench.caching import pieces, scripted_bodies

TURNS = 50


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def test_anthropic_repeats_everything_up_to_the_previous_last_breakpoint() -> None:
    bodies = scripted_bodies(anthropic_messages, TURNS)
    assert len(bodies) == TURNS
    for n, (before, now) in enumerate(itertools.pairwise(bodies), 2):
        (was, marks_before), (texts, marks) = pieces(before), pieces(now)
        end = marks_before[-1] + 1
        assert texts[:end] == was[:end], f"request {n} changed the cached prefix"
        assert len(marks) <= 4, f"request {n} has {len(marks)} breakpoints"
        assert marks[-1] == len(texts) - 1, f"request {n} does not mark its newest block"


@pytest.mark.parametrize(
    ("codec", "items"), [(openai_chat, "messages"), (openai_responses, "input")]
)
def test_openai_repeats_the_whole_previous_request(codec: Any, items: str) -> None:
    bodies = scripted_bodies(codec, TURNS)
    assert len(bodies) == TURNS
    for n, (before, now) in enumerate(itertools.pairwise(bodies), 2):
        assert len(now[items]) > len(before[items])
        head = now[items][: len(before[items])]
        assert canonical(head) == canonical(before[items]), f"request {n} changed the prefix"
        rest = {k: v for k, v in now.items() if k != items}
        assert canonical(rest) == canonical({k: v for k, v in before.items() if k != items})
