"""`simulate`: planted bugs found, shrunk, kept as regression files that fail until fixed."""

from __future__ import annotations

import importlib
import sys

import pytest
from turnstile.executors.testing import Violation, simulate

from .planted import BUGS, source

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_planted_bug_is_found_shrunk_and_kept_as_a_test_that_fails_until_fixed(
    bug: str, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(agent=source(bug, fixed=False))
    pytester.syspathinsert()
    sys.modules.pop("agent", None)
    simulation = importlib.import_module("agent").simulation
    report = simulate(**simulation, seeds=200, target="agent:simulation")
    [found] = report.violations
    assert found.invariant == BUGS[bug][3]
    assert report.runs[-1].seed < 200
    assert len(found.faults) <= 2
    found.save(pytester.path / f"test_{bug}.simulation.json")
    assert Violation.load(pytester.path / f"test_{bug}.simulation.json") == found

    sys.modules.pop("agent", None)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(failed=1)
    pytester.makepyfile(agent=source(bug, fixed=True))
    sys.modules.pop("agent", None)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
