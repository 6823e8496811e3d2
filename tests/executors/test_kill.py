"""The kill -9 campaign (`bench.kill`): journaled runs killed at random points and resumed in
new processes lose no call, run no call twice that is not replay-safe, and leave journals that
always read. The quick campaign (50 kills) runs in CI; the full one (300) with `-m slow`."""

from __future__ import annotations

import pytest

from bench.kill import KINDS, Report, campaign

SEED = 13


def check(report: Report, kills: int) -> None:
    shown = report.table() + "".join(f"\n{f}" for f in report.failures[:20])
    total = report.total
    assert report.ok, shown
    assert total.kills >= kills and total.finished == total.runs, shown
    assert total.lost == total.doubled == total.unreadable == 0, shown
    assert all(report.tallies[kind].runs for kind in KINDS), shown
    # kills landed in every phase the journal tells apart, and the resumes had work to do
    assert report.phases["tool calls"] and report.phases["a model call"], shown
    assert total.interrupted and total.reruns and total.resumed_twice, shown


def test_fifty_kills_lose_nothing_and_run_nothing_twice_that_is_not_replay_safe() -> None:
    check(campaign(50, SEED, sandbox_every=5), 50)


@pytest.mark.slow
def test_three_hundred_kills_across_sync_trio_and_the_sandbox() -> None:
    check(campaign(300, SEED), 300)
