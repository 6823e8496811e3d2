"""One conversation, every format that can carry it: where a feature exists in more than one
wire format, its traces replay to the same transcript (usage aside, which each provider counts
its own way), kept as one snapshot per feature."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from turnstile.executors import transcript
from turnstile.executors.testing import replay

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
FEATURES = {
    # images and a PDF in the prompt, an image from a tool (Chat's tool results carry no image)
    "media": ["anthropic/chart.json", "openai-responses/media.json"],
    "instructions mid-conversation": [
        "openai-chat/instructions.json",
        "openai-responses/instructions.json",
    ],
    "typed answer by the answer tool": [
        "openai-chat/output_tool.json",
        "openai-responses/output_tool.json",
    ],
    "typed answer by native output": [
        "openai-chat/output_native.json",
        "openai-responses/output_native.json",
    ],
    "caching off": ["openai-chat/cache_off.json", "openai-responses/cache_off.json"],
}
_USAGE = re.compile(r" · \d[^─]*?(?= ──)")


def shared(path: str) -> str:
    """The transcript of the trace's replay, without the usage in its turn lines."""
    return _USAGE.sub("", transcript(replay(FIXTURES / path).state))


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_feature_s_traces_give_one_transcript(feature: str, snapshot) -> None:
    first, *others = FEATURES[feature]
    expected = shared(first)
    for other in others:
        assert shared(other) == expected, f"{other} differs from {first}"
    assert expected == snapshot
