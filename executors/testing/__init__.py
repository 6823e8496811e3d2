"""turnstile.executors.testing: testing agents built on turnstile.

Scripted replies (`ScriptedModel`), what a run did (`calls`, `trajectory`,
`assert_history_valid`), whole loops replayed from a wire trace (`replay`), async tests on
virtual time under asyncio or trio (`run_async`), runs stored as
readable snapshots (`TranscriptExtension`, for syrupy) and the pytest plugin
(`turnstile.executors.testing.pytest_plugin`, loaded by pytest itself).

`replay` and `TranscriptExtension` are imported on first use: they need the SDKs and syrupy,
which `import turnstile.executors.testing` does not.
"""

from typing import TYPE_CHECKING, Any

from turnstile.executors import ScriptedModel as ScriptedModel

from ._checks import assert_history_valid as assert_history_valid
from ._checks import calls as calls
from ._checks import trajectory as trajectory
from ._time import run_async as run_async

if TYPE_CHECKING:
    from ._replay import replay as replay
    from ._syrupy import TranscriptExtension as TranscriptExtension

_LAZY = {"replay": "._replay", "TranscriptExtension": "._syrupy"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
