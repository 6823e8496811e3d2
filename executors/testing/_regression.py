"""Regression files as tests: the pytest plugin collects each `*.simulation.json` (a
`Violation.save`d) as a test that replays its seed under its fault schedule, against the
simulation its `target` names, and fails while the invariant still breaks."""

from __future__ import annotations

__all__ = ["SimulationFile"]

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._simcli import options_of, resolve
from ._simulate import SimulationFailed, Violation, replayed

SUFFIX = ".simulation.json"


class SimulationItem(pytest.Item):
    """One regression file: its seed, its faults, its checks, replayed."""

    def __init__(self, *, violation: Violation, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.violation = violation

    def runtest(self) -> None:
        violation = self.violation
        if violation.target is None:
            raise pytest.fail.Exception(
                f"{self.path.name} names no target (module:name): it cannot be replayed",
                pytrace=False,
            )
        options = options_of(resolve(violation.target, self.path.parent), violation.target)
        options.pop("seeds", None)
        replayed(violation, options.pop("spec"), options.pop("prompt", None), **options)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, SimulationFailed):
            return f"the simulation still breaks an invariant:\n{excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        v = self.violation
        return self.path, None, f"simulation seed {v.seed} ({v.invariant})"


class SimulationFile(pytest.File):
    """A `*.simulation.json` file: one test, its violation replayed."""

    def collect(self) -> Iterator[pytest.Item]:
        violation = Violation.load(self.path)
        yield SimulationItem.from_parent(
            self, name=f"seed{violation.seed}-{violation.invariant}", violation=violation
        )
