"""One seed's world: virtual time, crashes resumed from the journal, the scheduler's orders,
tool timeouts and model failures as the executors carry them out, and the same journal for
the same seed, byte for byte, in this process and in another."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Literal

import pytest
from turnstile.core import (
    Approved,
    Denied,
    LoopSpec,
    StopReason,
    Tool,
    ToolReturned,
    ToolStarted,
    tool,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall
from turnstile.executors import Journal
from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather
from turnstile.executors.testing import Fault, FaultKind, Faults, SimulationReport, simulate


def _journal(events: tuple[object, ...], path: Path) -> bytes:
    with Journal(path, fsync="never") as journal:
        for event in events:
            journal.append(event)  # type: ignore[arg-type]
    return path.read_bytes()


def _demo(**options: object) -> object:
    return simulate(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather], **options)


def test_the_same_seed_writes_the_same_journal_byte_for_byte(tmp_path: Path) -> None:
    first, second = _demo(seeds=50), _demo(seeds=50)
    for i, (a, b) in enumerate(zip(first.runs, second.runs, strict=True)):
        assert _journal(a.events, tmp_path / f"a{i}") == _journal(b.events, tmp_path / f"b{i}")
    assert {len(r.faults) for r in first.runs} != {0}  # faults struck, the same ones


def test_the_same_seed_writes_the_same_journal_in_another_process(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        from turnstile.executors import Journal
        from turnstile.executors._demo import PROMPT, demo_model, demo_spec, get_weather
        from turnstile.executors.testing import simulate
        report = simulate(demo_spec(), PROMPT, model=demo_model(), tools=[get_weather], seeds=20)
        for i, run in enumerate(report.runs):
            with Journal({str(tmp_path)!r} + f"/child{{i}}", fsync="never") as journal:
                for event in run.events:
                    journal.append(event)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for i, run in enumerate(_demo(seeds=20).runs):
        assert _journal(run.events, tmp_path / f"own{i}") == (tmp_path / f"child{i}").read_bytes()


def test_virtual_time_passes_without_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    def sleep(seconds: float) -> None:
        raise AssertionError("the simulation slept")

    monkeypatch.setattr(time, "sleep", sleep)
    report = _demo(seeds=[0], faults=Faults.only(tool_slow=1.0))
    assert report.runs[0].time > 10  # slow tools: seconds of virtual time


def _one_call(fn: Tool, arguments: dict[str, object], **options: object) -> SimulationReport:
    """A run of one call of `fn`, then the model's answer."""
    replies = [
        ModelResponse([ToolCall("c1", fn.name, arguments)], ModelStop.tool_use),
        ModelResponse([Text("done")], ModelStop.end_turn),
    ]
    return simulate(LoopSpec(), "go", model=replies, tools=[fn], **options)  # type: ignore[arg-type]


def test_a_crash_resumes_from_the_journal_and_runs_no_call_twice_that_is_not_replay_safe() -> None:
    ran: list[str] = []

    @tool
    def charge(order: int) -> str:
        """Charge an order."""
        ran.append(str(order))
        return "charged"

    calm = _one_call(charge, {"order": 1}, seeds=[0], faults=Faults.none(), reset=ran.clear)
    assert calm.ok and calm.runs[0].crashes == 0
    crashed = _one_call(
        charge, {"order": 1}, seeds=[0], faults=Faults.only(crash=0.5), reset=ran.clear
    )
    run = crashed.runs[0]
    assert crashed.ok and run.crashes > 0 and len(ran) <= 1
    assert run.stop_reason is StopReason.completed


def test_a_fixed_schedule_strikes_exactly_its_faults() -> None:
    from turnstile.executors.testing._faults import Schedule

    schedule = Schedule(7, Faults(), [Fault(FaultKind.crash, 2)])
    kinds = [schedule.draw("write")[0] for _ in range(5)]
    assert kinds == [None, None, FaultKind.crash, None, None]
    assert schedule.struck == [Fault(FaultKind.crash, 2)]


def test_reordered_tool_calls_come_back_in_another_order() -> None:
    orders = set()
    for run in _demo(seeds=30, faults=Faults.only(reorder=1.0)).runs:
        returned = [e.call_id for e in run.events if type(e) is ToolReturned]
        assert {e.call_id for e in run.events if type(e) is ToolStarted} == set(returned)
        orders.add(tuple(returned))
    assert len(orders) == 2


def test_a_hung_tool_ends_at_its_timeout_as_the_async_executor_ends_it() -> None:
    report = _demo(seeds=[0], faults=Faults.only(tool_hang=1.0), tool_timeout=9)
    results = [e for e in report.runs[0].events if type(e) is ToolReturned]
    assert results and all(r.is_error and "timed out after 9 s" in r.content for r in results)
    assert report.ok


def test_model_failures_retry_after_their_wait_or_end_the_run() -> None:
    retried = _demo(seeds=range(5), faults=Faults.only(model_retryable=0.5))
    assert any(r.faults for r in retried.runs) and retried.ok
    assert {r.stop_reason for r in retried.runs} <= {StopReason.completed, StopReason.model_error}
    for kind in ("model_final", "model_malformed"):
        failed = _demo(seeds=[0], faults=Faults.only(**{kind: 1.0}))
        assert failed.ok and failed.runs[0].stop_reason is StopReason.model_error


def test_approvals_come_late_or_are_denied_and_the_run_goes_on() -> None:
    @tool(needs_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return "refunded"

    faults = Faults.only(approval_late=0.5, approval_denied=0.5)
    report = _one_call(refund, {"order": 1}, seeds=20, faults=faults)
    answers = {type(e) for r in report.runs for e in r.events if type(e) in (Approved, Denied)}
    assert report.ok and answers == {Approved, Denied}
    assert max(r.time for r in report.runs) > 600  # an hour late, outside the deadline


def test_an_edited_approval_runs_the_call_with_arguments_that_fit_its_schema() -> None:
    ran: list[tuple[int, str]] = []

    @tool(needs_approval=True)
    def refund(order: int, reason: Literal["late", "broken"] = "late") -> str:
        """Refund an order."""
        ran.append((order, reason))
        return "refunded"

    report = _one_call(refund, {"order": 1}, seeds=10, faults=Faults.only(approval_edited=1.0))
    edits = [e.arguments for r in report.runs for e in r.events if type(e) is Approved]
    assert report.ok and len(edits) == 10
    assert all(e is not None and e != {"order": 1} for e in edits)
    assert all(refund.spec.arguments_problem(e) is None for e in edits)
    assert set(ran) == {(e["order"], e.get("reason", "late")) for e in edits}  # type: ignore[union-attr]
    assert len(set(map(str, edits))) > 1  # the draw picks the field and the change


def test_work_handed_out_after_a_hung_call_went_stale_still_comes_back() -> None:
    faults = Faults.only(tool_hang=1.0, model_retryable=0.5)
    report = _demo(seeds=20, faults=faults, keep_going=True, shrink=False)
    assert report.ok, str(report)
    assert StopReason.deadline in {r.stop_reason for r in report.runs}


def test_a_run_that_crashes_at_every_write_still_ends() -> None:
    report = _demo(seeds=[0], faults=Faults.only(crash=1.0))
    assert report.ok and report.runs[0].crashes == 20
