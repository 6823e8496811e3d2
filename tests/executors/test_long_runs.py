"""Long runs through an executor: 200 scripted turns in a small window under each compaction
strategy, and a fallback model through the replay transport."""

from __future__ import annotations

from pathlib import Path

import pytest
from turnstile.core import (
    Compaction,
    Guards,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    ModelRequest,
    StopReason,
)
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    Thinking,
    ToolCall,
    validate_history,
)
from turnstile.core.request import Purpose
from turnstile.executors import ScriptedModel, sync
from turnstile.executors.testing import replay

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TURNS = 200
WINDOW = 8_000


class Reader:
    """A model reading file after file: each turn thinks (signed) and calls `read`, the last
    answers; asked for a summary, it writes one. Every request it gets must be valid."""

    def __init__(self) -> None:
        self.turn = 0
        self.summaries = 0

    def __call__(self, request: ModelRequest) -> ModelResponse:
        validate_history(request.messages)
        if request.purpose is Purpose.summarize:
            self.summaries += 1
            return ModelResponse(
                [Text(f"Files 1-{self.turn} read; each is x.")], ModelStop.end_turn
            )
        self.turn += 1
        if self.turn == TURNS:
            return ModelResponse([Text(f"All {TURNS - 1} files hold x.")], ModelStop.end_turn)
        thought = Thinking(f"file {self.turn} next", signature=f"sig-{self.turn}")
        call = ToolCall(f"call-{self.turn}", "read", {"n": self.turn})
        return ModelResponse([thought, call], ModelStop.tool_use)


def read(n: int) -> str:
    """Read file n."""
    return f"file {n}: " + "x" * 600


def long_run(strategy: str) -> tuple[sync.Run, Reader, ScriptedModel]:  # type: ignore[name-defined]
    guards = Guards(
        max_turns=None,
        deadline_s=None,
        context_window=WINDOW,
        reserve_tokens=1_000,
        max_repeated_calls=None,
        max_stalled_rounds=None,
    )
    spec = LoopSpec(guards=guards, compaction=Compaction(strategy=strategy))  # type: ignore[arg-type]
    reader = Reader()
    model = ScriptedModel(reader)
    run = sync.run(
        spec, "Read files 1 to 199 and tell me what they hold.", model=model, tools=[read]
    )
    return run, reader, model


def excerpt(text: str) -> str:
    """The transcript around each compaction, two lines before and after, results cut short."""
    lines = text.split("\n")
    marks = [i for i, line in enumerate(lines) if line.startswith(("── compacted", "── summary"))]
    shown: list[str] = []
    last = -1
    for i in marks:
        start = max(i - 2, last + 1)
        if shown and start > last + 1:
            shown.append("…")
        shown += lines[start : i + 3]
        last = i + 2
    cut = [line[:60] + "…" if line.startswith("  ← ") else line for line in shown]
    return "\n".join([lines[0], "…", *cut, "…", lines[-1]])


@pytest.mark.parametrize("strategy", ["clear_tool_results", "drop_turns", "summarize"])
def test_a_200_turn_run_in_a_small_window_completes_under_each_strategy(
    strategy: str, snapshot
) -> None:
    run, reader, model = long_run(strategy)
    assert run.stop_reason is StopReason.completed and run.turns == TURNS
    assert run.output == f"All {TURNS - 1} files hold x."
    state = run.state
    assert len(state.messages) == 1 + 2 * (TURNS - 1) + 1, "the ledger keeps every message"
    validate_history(state.messages)
    assert state.compactions and all(c.tokens_after <= 0.8 * WINDOW for c in state.compactions)
    replies = [m for m in state.messages if type(m) is AssistantMessage]
    for request in model.requests:  # each valid (Reader checked), and its replies as they came
        shown = [m for m in request.messages if type(m) is AssistantMessage]
        assert all(m in replies for m in shown)
    assert reader.summaries == (len(state.compactions) if strategy == "summarize" else 0)
    assert excerpt(run.transcript()) == snapshot


def test_the_first_model_fails_with_529_past_its_retries_and_the_second_answers() -> None:
    run = replay(FIXTURES / "anthropic" / "fallback.json")
    assert run.stop_reason is StopReason.completed
    events = run.state.events
    failed = [(e.model, e.kind) for e in events if type(e) is ModelFailed]
    assert failed == [("claude-opus-4-1", "overloaded_error")] * 2
    answered = [e.model for e in events if type(e) is ModelReplied]
    assert answered == ["claude-sonnet-4-5"] * 2, "the log says which model answered each turn"
    usage = run.usage
    assert (usage.input_tokens, usage.output_tokens) == (512 + 293, 121 + 130)
    assert run.cost == pytest.approx((805 * 3.0 + 251 * 15.0) / 1e6)  # priced as sonnet
    assert "! model-1 to claude-opus-4-1 failed (retryable)" in run.transcript()
