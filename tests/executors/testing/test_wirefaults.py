"""Faults at the wire: a trace's real SDK client meets a 429, a 5xx, a spent quota, a reset,
a cut stream, malformed JSON or a timeout, and the loop sees the failure it would see live."""

from __future__ import annotations

from pathlib import Path

import pytest
from turnstile.core import ModelFailed
from turnstile.executors.testing import Faults, simulate

SEEN = {
    "wire_429": ("rate_limit_error", True),
    "wire_5xx": (None, True),
    "wire_quota": ("insufficient_quota", False),
    "wire_reset": ("connection_error", True),
    "wire_cut": ("connection_error", True),
    "wire_malformed": ("malformed_response", False),
    "wire_timeout": ("timeout", True),
}

FIXTURES = Path(__file__).parents[3] / "fixtures"


@pytest.mark.parametrize("kind", sorted(SEEN))
@pytest.mark.parametrize(
    "trace",
    [FIXTURES / "anthropic/weather.stream.json", FIXTURES / "openai-chat/weather.json"],
    ids=["anthropic-stream", "openai-chat"],
)
def test_a_fault_at_the_wire_fails_the_call_as_the_sdk_client_reports_it(
    kind: str, trace: Path
) -> None:
    report = simulate(None, model=trace, seeds=[0], faults=Faults.only(**{kind: 1.0}))
    assert report.ok, str(report)
    failed = [e for e in report.runs[0].events if type(e) is ModelFailed]
    expected_kind, retryable = SEEN[kind]
    assert failed and all(f.retryable is retryable for f in failed)
    if expected_kind is not None:
        assert {f.kind for f in failed} == {expected_kind}
    else:
        assert all(f.status in (500, 503, 529) for f in failed)
    if kind == "wire_429":
        assert all(f.retry_after is not None for f in failed)


def test_the_recorded_exchanges_outlive_the_faults() -> None:
    faults = Faults.only(wire_429=0.3, wire_reset=0.3)
    report = simulate(None, model=FIXTURES / "openai-chat/weather.json", seeds=20, faults=faults)
    assert report.ok and "completed" in {r.stop_reason for r in report.runs}
