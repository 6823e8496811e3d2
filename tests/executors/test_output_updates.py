"""A typed answer shown while it streams (`OutputDelta`): from the answer tool's arguments or
the reply's text, each partial a prefix of the next and the last the whole answer."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from turnstile.core import Guards, LoopSpec, ModelRequest
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.core.request import OUTPUT_TOOL
from turnstile.executors import OutputDelta, Update, aio, sync
from turnstile.executors._events import Answering
from turnstile.executors.testing import replay
from turnstile.providers import (
    ArgumentsDelta,
    Delta,
    TextDelta,
    anthropic_messages,
    openai_chat,
    openai_responses,
)
from turnstile.providers._client import StreamReader
from turnstile.providers.replay import load_trace

from .test_partial import is_prefix


class Trip(msgspec.Struct):
    city: str
    days: int
    sights: list[str]


FIXTURES = Path(__file__).parents[2] / "fixtures"
CODECS = {
    "anthropic": anthropic_messages,
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
}
ANSWER = {"city": "Kyoto", "days": 3, "sights": ["Fushimi Inari", "Kinkaku-ji"]}


class Streaming:
    """A model that streams its one reply in pieces of `size` characters, as a provider's
    accumulator would hand them on: the answer tool's arguments, or (native) the text."""

    def __init__(self, native: bool, text: str = json.dumps(ANSWER), size: int = 3) -> None:
        self.native, self.text, self.size = native, text, size

    def complete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        pieces = [self.text[i : i + self.size] for i in range(0, len(self.text), self.size)]
        for piece in pieces:
            if on_delta is not None:
                delta = (
                    TextDelta(0, piece)
                    if self.native
                    else ArgumentsDelta(0, "c1", OUTPUT_TOOL, piece)
                )
                on_delta(delta)
        if self.native:
            return ModelResponse([Text(self.text)], ModelStop.end_turn)
        return ModelResponse(
            [ToolCall("c1", OUTPUT_TOOL, json.loads(self.text))], ModelStop.tool_use
        )


def partials(updates: list[Update]) -> list[Any]:
    return [u.partial for u in updates if type(u) is OutputDelta]


@pytest.mark.parametrize("mode", ["tool", "native"])
def test_every_partial_is_a_prefix_of_the_next_and_the_last_is_the_answer(mode: str) -> None:
    updates: list[Update] = []
    spec = LoopSpec(output=Trip, output_mode=mode)  # type: ignore[arg-type]
    run = sync.run(
        spec, "Plan a trip.", model=Streaming(mode == "native"), on_update=updates.append
    )
    shown = partials(updates)
    assert len(shown) > 5
    for earlier, later in itertools.pairwise(shown):
        assert is_prefix(earlier, later) and earlier != later
    assert shown[-1] == ANSWER == msgspec.to_builtins(run.output)
    assert shown[0] == {} or is_prefix(shown[0], ANSWER)
    assert {"city": "Ky"} in shown  # a string as far as it came


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_executor_shows_the_same_partials(backend: str) -> None:
    spec = LoopSpec(output=Trip)
    expected: list[Update] = []
    sync.run(spec, "Plan a trip.", model=Streaming(False), on_update=expected.append)
    seen: list[Update] = []

    async def main() -> None:
        await aio.run(spec, "Plan a trip.", model=Streaming(False), on_update=seen.append)

    anyio.run(main, backend=backend)
    assert partials(seen) == partials(expected)


def test_prose_before_the_answer_says_nothing_and_a_run_without_output_shows_none() -> None:
    updates: list[Update] = []
    prose = Streaming(True, text="Kyoto is lovely in autumn.")
    sync.run(
        LoopSpec(output=Trip, output_mode="native", guards=Guards(max_output_retries=0)),
        "Plan.",
        model=prose,
        on_update=updates.append,
    )
    assert partials(updates) == []
    plain: list[Update] = []
    sync.run(LoopSpec(), "Plan.", model=Streaming(True), on_update=plain.append)
    assert partials(plain) == [] and any(type(u) is TextDelta for u in plain)


@pytest.mark.parametrize("provider", ["anthropic", "openai-chat", "openai-responses"])
def test_each_format_s_stream_of_the_answer_tool_shows_prefixes_of_its_arguments(
    provider: str,
) -> None:
    """The weather question's recorded stream, its two calls made the answer tool's: what each
    format's accumulator hands on says the first call's arguments as they come."""
    trace = load_trace(FIXTURES / provider / "weather.stream.json")
    sse = trace.exchanges[0].response.sse
    assert sse is not None and "get_weather" in sse
    updates: list[Update] = []
    reader = StreamReader(CODECS[provider].Client.wire, Answering(updates.append, native=False))
    data = sse.replace("get_weather", OUTPUT_TOOL).encode()
    for i in range(0, len(data), 7):  # in small pieces, as a network gives them
        reader.feed(data[i : i + 7])
    first = next(p for p in reader.result().content if type(p) is ToolCall)
    shown = partials(updates)
    assert shown and shown[-1] == first.arguments == {"city": "北京"}
    for earlier, later in itertools.pairwise(shown):
        assert is_prefix(earlier, later)


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
@pytest.mark.parametrize("mode", ["tool", "native"])
@pytest.mark.parametrize("provider", sorted(CODECS))
def test_a_recorded_streamed_answer_shows_prefixes_ending_in_the_typed_answer(
    provider: str, mode: str, executor: Any
) -> None:
    """Each format's recorded stream of a typed answer, through its real SDK client: every
    partial is a valid prefix of the next and the last is the answer the loop validated."""
    updates: list[Update] = []
    trace = FIXTURES / provider / f"output_{mode}.stream.json"
    run = replay(trace, executor=executor, on_update=updates.append)
    shown = partials(updates)
    assert len(shown) > 3
    for earlier, later in itertools.pairwise(shown):
        assert is_prefix(earlier, later)
    assert shown[-1] == msgspec.to_builtins(run.raise_for_error().output)
