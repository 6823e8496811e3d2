"""Guardrails under every executor: a tool-call check that trips on the first of a reply's two
calls stops the run before either runs, in process and after kill -9 at every journal record;
input checks run beside the first model call, final checks before the run finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from turnstile.core import GuardrailChecked, LoopSpec, StopReason, tool
from turnstile.core.guardrails import FinalAnswer, guardrail
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import Journal, Run, ScriptedModel, aio, sync
from turnstile.executors.testing import run_async

COUNTER = "TURNSTILE_TEST_COUNTER"


@tool
def delete(path: str) -> str:
    """Delete a file (here: count that it ran)."""
    with open(os.environ[COUNTER], "a") as f:
        f.write(f"{path}\n")
    return "deleted"


@guardrail(on="tool_call")
def no_root(call: ToolCall) -> str | None:
    return "refuses to touch /" if call.arguments.get("path") == "/" else None


@guardrail(on="input")
def polite(messages: list[Any]) -> str | None:
    return None


@guardrail(on="final")
def short(answer: FinalAnswer) -> str | None:
    return "too long" if len(answer.text) > 20 else None


RAILS = [polite, no_root, short]
SPEC = LoopSpec(tools=[delete], guardrails=RAILS)


def two_calls() -> ScriptedModel:
    """A reply whose first call the guardrail refuses, the second it would let through."""
    calls = [ToolCall("c1", "delete", {"path": "/"}), ToolCall("c2", "delete", {"path": "/tmp/x"})]
    return ScriptedModel([ModelResponse([Text("cleaning up"), *calls], ModelStop.tool_use)])


def ran(counter: Path) -> list[str]:
    return counter.read_text().split() if counter.exists() else []


@pytest.fixture
def counter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ran"
    monkeypatch.setenv(COUNTER, str(path))
    return path


def tripped(run: Run) -> None:
    assert run.stop_reason is StopReason.guardrail
    assert run.output == {
        "guardrail": "no_root",
        "on": "tool_call",
        "message": "refuses to touch /",
    }
    results = run.messages[-1].results  # type: ignore[union-attr]
    assert [r.content for r in results] == [
        "not run: the guardrail no_root tripped: refuses to touch /"
    ] * 2


def test_a_tool_call_guardrail_that_trips_runs_no_call_of_its_round_under_sync(
    counter: Path,
) -> None:
    run = sync.run(SPEC, "clean up", model=two_calls(), tools=[delete], guardrails=RAILS)
    tripped(run)
    assert ran(counter) == []


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_tool_call_guardrail_that_trips_runs_no_call_of_its_round_under_aio(
    counter: Path, backend: str
) -> None:
    async def go() -> Run:
        return await aio.run(SPEC, "clean up", model=two_calls(), tools=[delete], guardrails=RAILS)

    run = run_async(go, backend=backend)  # type: ignore[arg-type]
    tripped(run)
    assert ran(counter) == []


def test_calls_run_once_their_checks_pass_and_the_answer_once_it_is_checked(
    counter: Path,
) -> None:
    model = ScriptedModel(
        [
            ModelResponse([ToolCall("c1", "delete", {"path": "/tmp/x"})], ModelStop.tool_use),
            ModelResponse([Text("done")], ModelStop.end_turn),
        ]
    )
    run = sync.run(SPEC, "clean up", model=model, tools=[delete], guardrails=RAILS)
    assert (run.stop_reason, run.output) == (StopReason.completed, "done")
    assert ran(counter) == ["/tmp/x"]
    checked = [e.check_id for e in run.state.events if type(e) is GuardrailChecked]
    assert checked == ["model-1/input/polite", "c1/tool_call/no_root", "model-2/final/short"]


def test_a_final_guardrail_that_trips_withholds_the_answer(counter: Path) -> None:
    model = ScriptedModel([ModelResponse([Text("a very long answer indeed")], ModelStop.end_turn)])
    run = sync.run(SPEC, "hi", model=model, tools=[delete], guardrails=RAILS)
    assert run.stop_reason is StopReason.guardrail
    assert run.output["guardrail"] == "short"


def test_a_guardrail_that_raises_or_has_no_function_trips(counter: Path) -> None:
    @guardrail(on="input", name="polite")
    def broken(messages: list[Any]) -> None:
        raise RuntimeError("boom")

    model = ScriptedModel([ModelResponse([Text("hi")], ModelStop.end_turn)])
    run = sync.run(SPEC, "hi", model=model, tools=[delete], guardrails=[broken, no_root, short])
    assert run.output["message"] == "the guardrail polite raised RuntimeError: boom"
    with pytest.raises(ValueError, match="guardrails without a function: short"):
        sync.run(SPEC, "hi", model=model, tools=[delete], guardrails=[polite, no_root])


# -- kill -9 at every journal record ---------------------------------------------------------


def _child(journal: str, kill_at: int) -> None:
    """Run the two-call reply with a journal, killing this process (SIGKILL) once the journal
    holds `kill_at` events."""
    seen = 0

    def on_event(_: object) -> None:
        nonlocal seen
        seen += 1
        if seen == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    sync.run(
        SPEC,
        "clean up",
        model=two_calls(),
        tools=[delete],
        guardrails=RAILS,
        journal=journal,
        on_event=on_event,
    )


def test_killed_at_every_journal_record_and_resumed_no_call_ever_runs(
    counter: Path, tmp_path: Path
) -> None:
    whole = sync.run(SPEC, "clean up", model=two_calls(), tools=[delete], guardrails=RAILS)
    records = len(whole.state.events)
    for kill_at in range(1, records + 1):
        journal = tmp_path / f"run-{kill_at}.journal"
        child = subprocess.run(
            [sys.executable, "-m", "tests.executors.test_guardrails", str(journal), str(kill_at)],
            cwd=Path(__file__).parents[2],
            env={**os.environ, COUNTER: str(counter)},
            capture_output=True,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()
        for resume in ("sync", "asyncio", "trio"):
            copy = tmp_path / f"run-{kill_at}-{resume}.journal"
            copy.write_bytes(journal.read_bytes())
            model = two_calls()
            if resume == "sync":
                run = sync.run(SPEC, model=model, tools=[delete], guardrails=RAILS, journal=copy)
            else:

                async def go(copy: Path = copy, model: ScriptedModel = model) -> Run:
                    return await aio.run(
                        SPEC, model=model, tools=[delete], guardrails=RAILS, journal=copy
                    )

                run = run_async(go, backend=resume)  # type: ignore[arg-type]
            tripped(run)
            with Journal(copy) as read:  # the journal holds the trip, and replays to it
                assert read.loop(SPEC).state.stop_reason is StopReason.guardrail
    assert ran(counter) == []


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
