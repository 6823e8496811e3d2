"""turnstile.executors.testing: testing agents built on turnstile.

Scripted replies (`ScriptedModel`), what a run did (`calls`, `trajectory`,
`assert_history_valid`), whole loops replayed from a wire trace (`replay`), async tests on
virtual time under asyncio or trio (`run_async`), runs stored as
readable snapshots (`TranscriptExtension`, for syrupy), an agent simulated under many seeded
worlds of faults (`simulate`, `Faults`; a failure is a `Violation`, kept as a regression file
that `replayed` runs again) and the pytest plugin (`turnstile.executors.testing.pytest_plugin`,
loaded by pytest itself, which also collects regression files as tests).

`replay` and `TranscriptExtension` are imported on first use: they need the SDKs and syrupy,
which `import turnstile.executors.testing` does not.
"""

__all__ = [
    "Fault",
    "FaultKind",
    "Faults",
    "Outcome",
    "ScriptedModel",
    "SimulationFailed",
    "SimulationReport",
    "TranscriptExtension",
    "Violation",
    "assert_history_valid",
    "calls",
    "replay",
    "replayed",
    "run_async",
    "simulate",
    "trajectory",
]

import typing as _typing

from turnstile.executors import ScriptedModel as ScriptedModel

from ._checks import assert_history_valid as assert_history_valid
from ._checks import calls as calls
from ._checks import trajectory as trajectory
from ._faults import Fault as Fault
from ._faults import FaultKind as FaultKind
from ._faults import Faults as Faults
from ._simulate import Outcome as Outcome
from ._simulate import SimulationFailed as SimulationFailed
from ._simulate import SimulationReport as SimulationReport
from ._simulate import Violation as Violation
from ._simulate import replayed as replayed
from ._simulate import simulate as simulate
from ._time import run_async as run_async

if _typing.TYPE_CHECKING:
    from ._replay import replay as replay
    from ._syrupy import TranscriptExtension as TranscriptExtension

_LAZY = {"replay": "._replay", "TranscriptExtension": "._syrupy"}
"""Names imported on first use: they need the SDKs, or syrupy."""


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
