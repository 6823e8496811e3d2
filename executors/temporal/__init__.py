"""turnstile.executors.temporal: durable runs on Temporal (`pip install 'turnstile[temporal]'`).

The loop is the workflow's deterministic part; model and tool calls are activities, run by
workers that know the models by name and the tools by their runner. A worker that dies loses
nothing: another takes its runs over, and a call that is not replay-safe is never run twice.

    handle = await temporal.start(client, spec, prompt, model="claude", id="run-1",
                                  on_update=show)
    async with temporal.worker(client, models={"claude": claude}, tools=[get_weather], deps=db):
        run = await handle.result()

The arguments mean what they mean in `sync.run`, split by where they live: the tools, and the
`deps` handed to the tools that ask for them, are the worker's (a spec that names no tools is
offered the worker's); `on_event` and `on_update` are the caller's, given to `start` (or `run`)
and called while the handle's `result()` waits, which follows the workflow's loop by a query
(the model streams in the worker, so there are no deltas). A refused `answer` raises
`ProtocolError`, saying why.
"""

__all__ = [
    "TASK_QUEUE",
    "LoopHandle",
    "LoopWorkflow",
    "Options",
    "dev_server",
    "run",
    "start",
    "temporal_binary",
    "worker",
]

try:
    import temporalio as _temporalio  # noqa: F401  # without it, say which extra installs it
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "temporal", needed_by="turnstile.executors.temporal") from None

from ._client import LoopHandle as LoopHandle
from ._client import run as run
from ._client import start as start
from ._dev import dev_server as dev_server
from ._dev import temporal_binary as temporal_binary
from ._wire import TASK_QUEUE as TASK_QUEUE
from ._wire import Options as Options
from ._worker import worker as worker
from ._workflow import LoopWorkflow as LoopWorkflow
