"""turnstile.core: the agent loop as a pure, serializable state machine.

Here: the loop (`Loop`, `LoopSpec`, `LoopState`, `Guards`), tools (`@tool`), the commands it
gives, the observations it takes, and its errors. The rest is in public submodules:
`turnstile.core.messages` (messages, parts, a model's reply, history checks),
`turnstile.core.request` (a model request's options), `turnstile.core.conditions` (stop
conditions), `turnstile.core.guardrails` (`Guardrail`, `@guardrail`), `turnstile.core.state`
(a state's parts) and `turnstile.core.diagram` (the phase table drawn).
"""

__all__ = [
    "Approved",
    "AwaitApproval",
    "CallModel",
    "Cancelled",
    "CheckGuardrail",
    "Command",
    "Compaction",
    "CorruptState",
    "Denied",
    "Event",
    "Finish",
    "GuardrailChecked",
    "Guards",
    "InvalidHistory",
    "InvalidObservation",
    "InvalidSpec",
    "Loop",
    "LoopSpec",
    "LoopState",
    "ModelError",
    "ModelFailed",
    "ModelReplied",
    "ModelRequest",
    "Observation",
    "Price",
    "ProtocolError",
    "Resumed",
    "RunTool",
    "Started",
    "StopReason",
    "Tick",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolReturned",
    "ToolSpec",
    "ToolStarted",
    "TurnstileError",
    "tool",
]

from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import conditions as conditions
from . import diagram as diagram
from . import guardrails as guardrails
from . import messages as messages
from . import request as request
from . import state as state
from ._commands import AwaitApproval as AwaitApproval
from ._commands import CallModel as CallModel
from ._commands import CheckGuardrail as CheckGuardrail
from ._commands import Command as Command
from ._commands import Finish as Finish
from ._commands import ModelRequest as ModelRequest
from ._commands import RunTool as RunTool
from ._commands import StopReason as StopReason
from ._compaction import Compaction as Compaction
from ._cost import Price as Price
from ._errors import CorruptState as CorruptState
from ._errors import InvalidHistory as InvalidHistory
from ._errors import InvalidObservation as InvalidObservation
from ._errors import InvalidSpec as InvalidSpec
from ._errors import ModelError as ModelError
from ._errors import ProtocolError as ProtocolError
from ._errors import TurnstileError as TurnstileError
from ._guards import Guards as Guards
from ._loop import Loop as Loop
from ._observations import Approved as Approved
from ._observations import Cancelled as Cancelled
from ._observations import Denied as Denied
from ._observations import Event as Event
from ._observations import GuardrailChecked as GuardrailChecked
from ._observations import ModelFailed as ModelFailed
from ._observations import ModelReplied as ModelReplied
from ._observations import Observation as Observation
from ._observations import Resumed as Resumed
from ._observations import Started as Started
from ._observations import Tick as Tick
from ._observations import ToolReturned as ToolReturned
from ._observations import ToolStarted as ToolStarted
from ._spec import LoopSpec as LoopSpec
from ._state import LoopState as LoopState
from ._tools import Tool as Tool
from ._tools import ToolContext as ToolContext
from ._tools import ToolOutcome as ToolOutcome
from ._tools import ToolSpec as ToolSpec
from ._tools import tool as tool

if _TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> str:
        """`__version__`: the installed distribution's version, read from its metadata when
        asked (importing the core reads no file). Hidden from type checkers, which would
        otherwise take any misspelt name for a string."""
        if name == "__version__":
            from importlib.metadata import version

            return version("turnstile")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
