"""What a model request may ask beyond the conversation (`ModelRequest`'s and `LoopSpec`'s
options): which tools the model may or must call, tools the provider runs, prompt caching, a
shape for the answer, and what the call is for."""

__all__ = [
    "OUTPUT_TOOL",
    "CachePolicy",
    "OutputFormat",
    "Purpose",
    "ServerTool",
    "ToolChoice",
    "UseTool",
]

from ._commands import Purpose as Purpose
from ._output import OUTPUT_TOOL as OUTPUT_TOOL
from ._request import CachePolicy as CachePolicy
from ._request import OutputFormat as OutputFormat
from ._request import ServerTool as ServerTool
from ._request import ToolChoice as ToolChoice
from ._request import UseTool as UseTool
