"""Whole-loop replay: a trace's loop driven by a real executor over the provider's `Client`, the
official SDK and a replay of the trace's HTTP exchanges."""

from __future__ import annotations

__all__ = ["replay"]

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from turnstile.core import Command, Event, ModelFailed, ModelRequest, Observation, StopReason
from turnstile.core.messages import ModelResponse
from turnstile.executors import Run, ToolRunner, Update, sync
from turnstile.providers import Delta
from turnstile.providers.client import WireClient
from turnstile.providers.replay import (
    RecordedTools,
    ReplayMismatch,
    Trace,
    client_and_transport,
    load_trace,
    prompt_for,
    spec_for,
)

from ._time import run_async


class _Watched:
    """Passes calls on to the client, keeping a `ReplayMismatch` that the executor would
    otherwise turn into an ordinary failed model call."""

    def __init__(self, client: WireClient) -> None:
        self._client = client
        self.mismatch: ReplayMismatch | None = None

    def complete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        try:
            return self._client.complete(request, on_delta=on_delta)
        except ReplayMismatch as err:
            self.mismatch = self.mismatch or err
            raise

    async def acomplete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        try:
            return await self._client.acomplete(request, on_delta=on_delta)
        except ReplayMismatch as err:
            self.mismatch = self.mismatch or err
            raise


class _Time:
    """A sync replay's clock: it stands still but for the waits the loop asks for (a retry's
    `not_before`), which pass at once."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


def replay(
    trace: Trace | str | Path,
    *,
    executor: Literal["sync", "asyncio", "trio"] = "sync",
    tools: ToolRunner | None = None,
    on_step: Callable[[Command | Observation], None] | None = None,
    on_event: Callable[[Event], None] | None = None,
    on_update: Callable[[Update], object] | None = None,
) -> Run:
    """Run the trace's loop with its recorded model replies and tool outputs; return the `Run`.

    `executor="asyncio"` or `"trio"` drives it with the async executor (`turnstile.executors.aio`,
    inside its own event loop of that kind, on `run_async`'s virtual time) over the async SDK
    client. `tools` runs the calls instead of the recorded outputs (real tools, a sandbox): they
    must produce those outputs, or the next request will not match. `on_step` sees every
    command and observation, `on_event` every event and `on_update` every `Update`, as in the
    executors. Time is the
    replay's own: it starts at 0 and moves only when the loop waits for a time (a retry's
    `not_before`), at once, so a replay never really waits and always makes the same decisions.

    Raises:
        ReplayMismatch: a request differed from the recording (the message holds the diff), a
            tool call had no recorded output, or the run ended with exchanges unused (the
            message says why it ended); the message ends with the transcript of the run until
            then.
        TraceError: `trace` is not a replayable trace.
    """
    if executor not in ("sync", "asyncio", "trio"):
        raise ValueError(f"unknown executor {executor!r}: use 'sync', 'asyncio' or 'trio'")
    if not isinstance(trace, Trace):
        trace = load_trace(trace)
    prompt = prompt_for(trace)
    spec = spec_for(trace)
    recorded = RecordedTools(trace)
    tools = recorded if tools is None else tools
    client, transport = client_and_transport(trace, sync=executor == "sync")
    model = _Watched(client)
    if executor == "sync":
        time = _Time()
        run = sync.run(
            spec,
            prompt,
            model=model,
            tools=tools,
            clock=time.clock,
            sleep=time.sleep,
            on_step=on_step,
            on_event=on_event,
            on_update=on_update,
        )
    else:
        from turnstile.executors import aio

        drive = functools.partial(
            aio.run,
            spec,
            prompt,
            model=model,
            tools=tools,
            on_step=on_step,
            on_event=on_event,
            on_update=on_update,
        )
        run = run_async(drive, backend=executor)
    if model.mismatch is not None:
        raise _with_run(model.mismatch.index, str(model.mismatch), run)
    served = len(trace.exchanges) - len(transport.remaining)
    if recorded.unrecorded:
        calls = "; ".join(recorded.unrecorded)
        raise _with_run(served, f"the trace has no recorded output for: {calls}", run)
    if transport.remaining:
        nxt = transport.remaining[0].request
        raise _with_run(
            served,
            f"the run ended ({run.stop_reason.value}) after {served} of "
            f"{len(trace.exchanges)} exchanges{_because(run)}; the next was {nxt.method} "
            f"{nxt.path}",
            run,
        )
    return run


def _because(run: Run) -> str:
    """Why the run ended, when a failed model call ended it."""
    if run.stop_reason is StopReason.model_error:
        failed = next((e for e in reversed(run.state.events) if type(e) is ModelFailed), None)
        if failed is not None:
            return f", because {failed.command_id} failed: {failed.message}"
    return ""


def _with_run(index: int, message: str, run: Run) -> ReplayMismatch:
    """The mismatch, followed by the transcript of the run until then: how far it got."""
    return ReplayMismatch(index, f"{message}\n\nThe run until then:\n{run.transcript()}")
