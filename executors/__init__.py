"""turnstile.executors: drivers that carry out a loop's commands (model calls, tool runs)."""

from . import sync as sync
from . import trio as trio
from ._protocols import AsyncModelClient as AsyncModelClient
from ._protocols import ModelClient as ModelClient
from ._protocols import ToolRunner as ToolRunner
from ._run import Run as Run
from ._scripted import ScriptedModel as ScriptedModel
from ._toolbox import Toolbox as Toolbox
from ._transcript import transcript as transcript
