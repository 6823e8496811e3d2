"""The async executor behaves the same under asyncio and trio (time is `run_async`'s, virtual)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
import pytest
import sniffio
import trio
from turnstile.core import (
    Guards,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelError,
    ModelFailed,
    ModelRequest,
    StopReason,
    Tick,
    ToolContext,
    ToolReturned,
    tool,
)
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    Usage,
    validate_history,
)
from turnstile.executors import Edit, Run, ScriptedModel, aio, sync
from turnstile.executors.testing import run_async

from .backoff import retries_wait

BACKENDS = ["asyncio", "trio"]


@tool
async def nap(n: int) -> str:
    """Sleep 100 ms."""
    await anyio.sleep(0.1)
    return f"woke {n}"


@tool(parallel_safe=False)
async def serial_nap(n: int) -> str:
    """Sleep 100 ms, overlapping with nothing."""
    await anyio.sleep(0.1)
    return f"woke {n}"


def batch(name: str, n: int = 8) -> ScriptedModel:
    calls = [ToolCall(f"c{i}", name, {"n": i}) for i in range(n)]
    return ScriptedModel(
        [
            ModelResponse(calls, ModelStop.tool_use, Usage(10, 5)),
            ModelResponse([Text("rested")], ModelStop.end_turn, Usage(10, 5)),
        ]
    )


def returned(run: Run) -> list[tuple[str, float]]:
    return [(e.call_id, e.now) for e in run.state.events if type(e) is ToolReturned]


def under(backend: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    return run_async(fn, backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_parallel_safe_tools_finish_together(backend: str) -> None:
    run = under(backend, lambda: aio.run(LoopSpec(), "rest", model=batch("nap"), tools=[nap]))
    assert run.stop_reason is StopReason.completed
    assert [t for _, t in returned(run)] == pytest.approx([0.1] * 8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_serial_tools_take_800ms_in_call_order(backend: str) -> None:
    model = batch("serial_nap")
    run = under(backend, lambda: aio.run(LoopSpec(), "rest", model=model, tools=[serial_nap]))
    assert [c for c, _ in returned(run)] == [f"c{i}" for i in range(8)]
    assert [t for _, t in returned(run)] == pytest.approx([0.1 * (i + 1) for i in range(8)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_tools_run_in_threads_at_the_same_time(backend: str) -> None:
    barrier = threading.Barrier(4, timeout=10)

    @tool
    def meet(n: int) -> str:
        """Returns only once all four calls are running at once."""
        barrier.wait()
        return "met"

    run = under(backend, lambda: aio.run(LoopSpec(), "go", model=batch("meet", 4), tools=[meet]))
    assert [r.content for r in run.messages[2].results] == ["met"] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lone_sync_tool_does_not_block_the_event_loop(backend: str) -> None:
    """The event loop goes on while a sync tool runs: its ticks are counted meanwhile."""
    release = threading.Event()
    ticks = 0

    @tool
    def block(n: int) -> str:
        """Blocks until released."""
        release.wait(timeout=10)
        return "done"

    async def ticker() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            if ticks == 20:
                release.set()
            await anyio.sleep(0)

    async def main() -> Run:
        async with anyio.create_task_group() as group:
            group.start_soon(ticker)
            return await aio.run(LoopSpec(), "go", model=batch("block", 1), tools=[block])

    run = anyio.run(main, backend=backend)
    assert ticks >= 20 and run.messages[2].results[0].content == "done"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tool_timeout_becomes_an_error_result_naming_it(backend: str) -> None:
    @tool(timeout_s=1.0)
    async def stuck(n: int) -> str:
        """Never returns."""
        await anyio.sleep_forever()
        return ""

    run = under(backend, lambda: aio.run(LoopSpec(), "go", model=batch("stuck", 1), tools=[stuck]))
    [result] = run.messages[2].results
    assert result.is_error and result.content == "stuck timed out after 1 s"
    assert returned(run) == [("c0", pytest.approx(1.0))]


async def work_in_a_thread(way: str) -> None:
    """50 ms of real work in a worker thread, handed there the way named."""
    if way == "anyio":
        await anyio.to_thread.run_sync(time.sleep, 0.05)
    elif sniffio.current_async_library() == "trio":
        await trio.to_thread.run_sync(time.sleep, 0.05)
    else:
        await asyncio.to_thread(time.sleep, 0.05)  # the event loop's executor, as SDKs do


@pytest.mark.parametrize("way", ["a sync tool", "anyio", "the event loop's own"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_virtual_time_stands_still_while_a_worker_thread_works(backend: str, way: str) -> None:
    """A second of virtual deadline outlasts real work in a thread, however it got there."""

    @tool
    def sync_work(n: int) -> str:
        """Works 50 ms."""
        time.sleep(0.05)
        return "worked"

    @tool
    async def async_work(n: int) -> str:
        """Works 50 ms in a thread."""
        await work_in_a_thread(way)
        return "worked"

    work = sync_work if way == "a sync tool" else async_work
    spec = LoopSpec(guards=Guards(deadline_s=1.0))
    model = batch(work.spec.name, 2)
    run = under(backend, lambda: aio.run(spec, "go", model=model, tools=[work]))
    assert run.stop_reason is StopReason.completed
    assert sorted(returned(run)) == [("c0", 0.0), ("c1", 0.0)]


@tool
async def slow(n: int) -> str:
    """Takes a minute."""
    await anyio.sleep(60)
    return "late"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_the_run_returns_finish_cancelled_with_a_valid_history(backend: str) -> None:
    async def main() -> Run:
        with anyio.move_on_after(0.5):
            return await aio.run(LoopSpec(), "go", model=batch("slow", 3), tools=[slow])
        raise AssertionError("run() must return when cancelled")

    run = under(backend, main)
    assert run.finish is not None and run.finish.reason is StopReason.cancelled
    validate_history(run.messages)
    assert [("cancelled" in r.content) for r in run.messages[-1].results] == [True] * 3


def test_an_asyncio_timeout_cancels_the_run_the_same_way() -> None:
    async def main() -> Run | None:
        try:
            async with asyncio.timeout(0.5):
                return await aio.run(LoopSpec(), "go", model=batch("slow", 1), tools=[slow])
        except TimeoutError:
            return None

    run = run_async(main)
    assert run is not None and run.stop_reason is StopReason.cancelled
    validate_history(run.messages)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_deadline_fires_while_every_tool_is_still_busy(backend: str) -> None:
    model = batch("slow", 2)
    model._script.insert(1, ModelResponse([Text("gave up")], ModelStop.end_turn, Usage(1, 1)))
    spec = LoopSpec(guards=Guards(deadline_s=5.0))
    run = under(backend, lambda: aio.run(spec, "go", model=model, tools=[slow]))
    assert run.stop_reason is StopReason.deadline and run.output == "gave up"
    assert all("deadline" in r.content for r in run.messages[2].results)
    assert [e.now for e in run.state.events if type(e) is Tick] == [5.0]
    validate_history(run.messages)


async def its_own_cancel(how: str) -> None:
    """Raises a cancel though no one cancelled the task, as a tool or a client might."""
    if how == "a cancelled future":
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future  # someone else's future, cancelled by them
    elif how == "a cancel it caught":  # trio's: it has no public constructor
        caught: BaseException | None = None
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await trio.sleep(1)
            except trio.Cancelled as e:
                caught = e
                raise
        assert caught is not None
        raise caught
    raise asyncio.CancelledError


OWN_CANCELS = [
    ("asyncio", "asyncio.CancelledError"),
    ("asyncio", "a cancelled future"),
    ("trio", "asyncio.CancelledError"),
    ("trio", "a cancel it caught"),
]


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize(
    ("backend", "how"), [*OWN_CANCELS, ("asyncio", "a sync tool"), ("trio", "a sync tool")]
)
def test_a_tool_raising_a_cancel_of_its_own_is_an_error_result_and_the_run_goes_on(
    backend: str, how: str, n: int
) -> None:
    @tool
    async def gives_up(n: int) -> str:
        """Raises a cancel, no one cancelling it."""
        await its_own_cancel(how)
        return "unreachable"

    @tool
    def gives_up_in_a_thread(n: int) -> str:
        """Raises asyncio's cancel in a worker thread."""
        raise asyncio.CancelledError

    work = gives_up_in_a_thread if how == "a sync tool" else gives_up
    model = batch(work.spec.name, n)
    run = under(backend, lambda: aio.run(LoopSpec(), "go", model=model, tools=[work]))
    assert run.stop_reason is StopReason.completed and run.output == "rested"
    validate_history(run.messages)
    results = run.messages[2].results
    assert [r.is_error for r in results] == [True] * n
    assert all(f"{work.spec.name} failed: Cancel" in r.content for r in results)


@pytest.mark.parametrize(("backend", "how"), OWN_CANCELS)
def test_a_model_client_raising_a_cancel_of_its_own_is_a_failed_model_call(
    backend: str, how: str
) -> None:
    class GivesUp(ScriptedModel):
        async def acomplete(self, request: ModelRequest, **kwargs: Any) -> ModelResponse:
            await its_own_cancel(how)
            raise AssertionError("unreachable")

    run = under(backend, lambda: aio.run(LoopSpec(), "hi", model=GivesUp([])))
    assert run.stop_reason is StopReason.model_error
    validate_history(run.messages)


class SlowFirst(ScriptedModel):
    """Its first reply takes a minute; the others come at once."""

    async def acomplete(self, request: ModelRequest, **kwargs: Any) -> ModelResponse:
        if not self.requests:
            self.requests.append(request)
            await anyio.sleep(60)
            raise AssertionError("the slow call must have been abandoned")
        return self.complete(request)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_deadline_abandons_a_model_call_under_way(backend: str) -> None:
    """The lone model call is awaited without a task of its own; the deadline still ends it."""
    model = SlowFirst([ModelResponse([Text("summary")], ModelStop.end_turn, Usage(1, 1))])
    run = under(
        backend, lambda: aio.run(LoopSpec(guards=Guards(deadline_s=5.0)), "go", model=model)
    )
    assert run.stop_reason is StopReason.deadline
    assert [e.now for e in run.state.events if type(e) is Tick] == [5.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_retry_is_not_sent_before_the_time_the_loop_set(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    retries_wait(monkeypatch, 1.5)
    sent_at: list[float] = []

    class Timed(ScriptedModel):
        async def acomplete(self, request: ModelRequest, **kwargs: Any) -> ModelResponse:
            sent_at.append(anyio.current_time())
            return self.complete(request)

    model = Timed([ModelError("overloaded", retryable=True), batch("nap")._script[1]])
    spec = LoopSpec(guards=Guards(max_model_retries=1))
    run = under(backend, lambda: aio.run(spec, "hi", model=model))
    assert run.stop_reason is StopReason.completed
    assert sent_at == pytest.approx([0.0, 1.5])


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_from_a_dump_with_an_async_approver(backend: str) -> None:
    @tool(needs_approval=True)
    async def launch(n: int) -> str:
        """Needs a human."""
        return "launched"

    spec = LoopSpec(tools=(launch.spec,))
    model = batch("launch", 1)
    first = under(backend, lambda: aio.run(spec, "go", model=model, tools=[launch]))
    assert first.finish is None and [c.id for c in first.waiting] == ["c0"]
    loop = Loop.load(spec, first.loop.dump())

    async def approve(command: object) -> bool:
        await anyio.sleep(700)  # longer than the deadline: a human's time is not the run's
        return True

    run = under(
        backend,
        lambda: aio.run(spec, model=model, tools=[launch], loop=loop, approve=approve),
    )
    assert run.stop_reason is StopReason.completed
    assert run.messages[2].results[0].content == "launched"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_approver_sync_or_async_may_edit_and_an_edit_that_does_not_fit_is_refused(
    backend: str,
) -> None:
    ran: list[int] = []

    @tool(needs_approval=True)
    async def launch(n: int) -> str:
        """Needs a human."""
        ran.append(n)
        return "launched"

    spec = LoopSpec(tools=(launch.spec,))

    async def edit(command: object) -> Edit:
        return Edit({"n": 7})

    for approver in (edit, lambda command: Edit({"n": 8})):
        run = under(backend, lambda a=approver: aio.run(spec, "go", model=batch("launch", 1),
                                                        tools=[launch], approve=a))  # fmt: skip
        assert run.stop_reason is StopReason.completed
    assert ran == [7, 8]
    with pytest.raises(InvalidObservation, match=r"arguments\.n: the edited arguments of launch"):
        under(backend, lambda: aio.run(spec, "go", model=batch("launch", 1), tools=[launch],
                                       approve=lambda command: Edit({"n": "x"})))  # fmt: skip
    assert ran == [7, 8]


class Deps(msgspec.Struct):
    user: str


@pytest.mark.parametrize("backend", BACKENDS)
def test_deps_reach_async_and_sync_tools_and_nothing_else(backend: str) -> None:
    seen: list[tuple[str, str, str]] = []

    @tool
    async def whoami(n: int, context: ToolContext[Deps]) -> str:
        """Who asks."""
        seen.append(("async", context.call_id, context.deps.user))
        return "ok"

    @tool
    def whoami_sync(n: int, context: ToolContext[Deps]) -> str:
        """Who asks, from a thread."""
        seen.append(("sync", context.call_id, context.deps.user))
        return "ok"

    calls = [ToolCall("a", "whoami", {"n": 1}), ToolCall("s", "whoami_sync", {"n": 2})]
    model = ScriptedModel(
        [
            ModelResponse(calls, ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )
    secret = Deps("ada-secret")
    run = under(
        backend,
        lambda: aio.run(LoopSpec(), "go", model=model, tools=[whoami, whoami_sync], deps=secret),
    )
    assert sorted(seen) == [("async", "a", "ada-secret"), ("sync", "s", "ada-secret")]
    assert b"ada-secret" not in run.loop.dump()
    assert all("ada-secret" not in repr(r) for r in model.requests)
    assert "context" not in whoami.spec.parameters["properties"]


def test_without_anyio_the_executor_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "anyio", None)  # import anyio -> ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "turnstile.executors.aio")
    needs = r"turnstile.executors.aio needs the anyio package: pip install 'turnstile\[aio\]'"
    with pytest.raises(ImportError, match=needs):
        importlib.import_module("turnstile.executors.aio")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_retry_whose_time_has_passed_is_sent_at_once(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a clock that moves 10 s at every reading, the 1.5 s a retry waits are over before
    it is sent: it goes out at once."""
    retries_wait(monkeypatch, 1.5)
    readings = iter(range(0, 10_000, 10))
    model = ScriptedModel(
        [
            ModelError("overloaded", retryable=True),
            ModelResponse([Text("ok")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )
    spec = LoopSpec(guards=Guards(max_model_retries=1))
    run = under(
        backend, lambda: aio.run(spec, "hi", model=model, clock=lambda: float(next(readings)))
    )
    assert run.stop_reason is StopReason.completed and len(model.requests) == 2


class Garbage:
    """A model client with a bug: what it returns is not a `ModelResponse`."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def complete(self, request: Any) -> Any:
        return self.reply


class AsyncGarbage(Garbage):
    async def acomplete(self, request: Any) -> Any:
        return self.reply


GARBAGE = [
    None,
    "hello",
    {"content": []},
    ModelResponse([None], ModelStop.end_turn, Usage(1, 1)),  # type: ignore[list-item]
    object(),
]


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
@pytest.mark.parametrize("reply", GARBAGE, ids=["none", "str", "dict", "bad-content", "object"])
def test_a_model_client_s_garbage_reply_ends_the_run_as_a_model_error(
    executor: str, reply: Any
) -> None:
    if executor == "sync":
        run = sync.run(LoopSpec(), "hi", model=Garbage(reply))
    else:
        run = run_async(
            lambda: aio.run(LoopSpec(), "hi", model=AsyncGarbage(reply)),
            backend=executor,  # type: ignore[arg-type]
        )
    assert run.stop_reason is StopReason.model_error
    [failed] = [e for e in run.state.events if type(e) is ModelFailed]
    assert not failed.retryable and "not a valid reply" in failed.message
    validate_history(run.messages)
