"""turnstile.executors: drivers that carry out a loop's commands (model calls, tool runs).

An `Agent` (a spec, its model and its tools) is what they run. `sync` is imported eagerly;
`aio` (the async executor, under asyncio or trio) and `sandbox` on first use, so
`import turnstile.executors` does not pay for anyio. The `Update`s a run shows its
caller (`on_update=`) are here too. `Journal` keeps a run's events in a file, so the run can
outlive its process; `fork` cuts a run at any event, one thing changed, and serves the rest
from its log while the fork stays on its track. Above them: `turnstile.executors.testing`, for
testing agents, and `turnstile.executors.cli`, the `turnstile` command. `Session` is the
protocol every executor follows, without I/O, for a runtime of one's own; `invoke` and
`ainvoke` call a tool's function.
"""

__all__ = [
    "Agent",
    "ApprovalNeeded",
    "AsyncModelClient",
    "ChildApproval",
    "CorruptJournal",
    "Divergence",
    "Edit",
    "Failure",
    "Fork",
    "Journal",
    "ModelCallFailed",
    "ModelCallFinished",
    "ModelCallStarted",
    "ModelClient",
    "ModelRetry",
    "OutputDelta",
    "ParentChanged",
    "Run",
    "RunFailed",
    "RunFinished",
    "ScriptedModel",
    "Session",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolRunner",
    "Toolbox",
    "TornJournal",
    "Update",
    "ainvoke",
    "as_tool",
    "divergence",
    "fork",
    "invoke",
    "transcript",
]

import typing as _typing

from . import sync as sync
from ._agent import Agent as Agent
from ._agent import ChildApproval as ChildApproval
from ._agent import as_tool as as_tool
from ._diff import Divergence as Divergence
from ._diff import divergence as divergence
from ._effects import Edit as Edit
from ._events import ApprovalNeeded as ApprovalNeeded
from ._events import ModelCallFailed as ModelCallFailed
from ._events import ModelCallFinished as ModelCallFinished
from ._events import ModelCallStarted as ModelCallStarted
from ._events import ModelRetry as ModelRetry
from ._events import OutputDelta as OutputDelta
from ._events import RunFinished as RunFinished
from ._events import ToolCallFinished as ToolCallFinished
from ._events import ToolCallStarted as ToolCallStarted
from ._events import Update as Update
from ._fork import fork as fork
from ._invoke import ainvoke as ainvoke
from ._invoke import invoke as invoke
from ._journal import CorruptJournal as CorruptJournal
from ._journal import Journal as Journal
from ._journal import TornJournal as TornJournal
from ._lineage import ParentChanged as ParentChanged
from ._protocols import AsyncModelClient as AsyncModelClient
from ._protocols import ModelClient as ModelClient
from ._protocols import ToolRunner as ToolRunner
from ._run import Failure as Failure
from ._run import Run as Run
from ._run import RunFailed as RunFailed
from ._scripted import ScriptedModel as ScriptedModel
from ._served import Fork as Fork
from ._session import Session as Session
from ._toolbox import Toolbox as Toolbox
from ._transcript import transcript as transcript

if _typing.TYPE_CHECKING:
    from . import aio as aio
    from . import sandbox as sandbox

_LAZY = ("aio", "sandbox")
"""Submodules imported on first use: they need anyio, or start a probe."""


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
