"""What a run shows its caller as it goes (`on_update`, `aio.updates`): the same from every
executor, every announced call finished once, and the deltas of a streamed reply in between."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from turnstile.core import Guards, LoopSpec, ModelError, StopReason, tool
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    Usage,
    validate_history,
)
from turnstile.executors import (
    ApprovalNeeded,
    Edit,
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    ModelRetry,
    RunFinished,
    ScriptedModel,
    ToolCallFinished,
    ToolCallStarted,
    Update,
    aio,
    sync,
)
from turnstile.executors.sandbox import Sandbox, SandboxLimits
from turnstile.executors.testing import replay, run_async
from turnstile.providers import TextDelta

from .backoff import retries_wait

WEATHER = Path(__file__).parent.parent.parent / "fixtures" / "openai-chat" / "weather.stream.json"
TOOLS = ["tests.executors.conformance_tools:get_weather"]
_TOOL_UPDATES = (ToolCallStarted, ToolCallFinished)
_decode = msgspec.json.Decoder(Update)


def shown(updates: list[Update]) -> list[str]:
    """One JSON line per update. Calls that overlap (the async executor runs a reply's calls at
    once, sync one after another) start and finish in any order, so a run of consecutive tool
    updates is listed starts first, each part sorted."""
    lines: list[str] = []
    tools: list[tuple[bool, str]] = []
    for update in updates:
        line = msgspec.json.encode(update).decode()
        if isinstance(update, _TOOL_UPDATES):
            tools.append((type(update) is ToolCallFinished, line))
            continue
        lines += [line for _, line in sorted(tools)]
        tools = []
        lines.append(line)
    return [*lines, *[line for _, line in sorted(tools)]]


def test_the_weather_run_shows_the_same_updates_from_every_executor(snapshot: Any) -> None:
    seen: dict[str, list[Update]] = {}
    for executor in ("sync", "asyncio", "trio"):
        seen[executor] = []
        replay(WEATHER, executor=executor, on_update=seen[executor].append)  # type: ignore[arg-type]
    with Sandbox(TOOLS, SandboxLimits(wall_s=20)) as box:
        for executor in ("sync", "asyncio"):
            seen[f"{executor} · sandbox"] = updates = []
            replay(WEATHER, executor=executor, tools=box, on_update=updates.append)  # type: ignore[arg-type]
    by_sync = shown(seen["sync"])
    for executor, updates in seen.items():
        assert shown(updates) == by_sync, executor
    for line in by_sync:  # each reads back as the update it was
        assert msgspec.json.encode(_decode.decode(line)).decode() == line
    assert by_sync == snapshot


def test_the_deltas_of_a_streamed_reply_add_up_to_its_text() -> None:
    updates: list[Update] = []
    replay(WEATHER, on_update=updates.append)
    finished = [u for u in updates if type(u) is ModelCallFinished]
    started = [i for i, u in enumerate(updates) if type(u) is ModelCallStarted]
    for start, done in zip(started, finished, strict=True):
        end = updates.index(done)
        deltas = [u.text for u in updates[start:end] if type(u) is TextDelta]
        assert "".join(deltas) == done.text != ""


def reply(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(list(calls), ModelStop.tool_use, Usage(1, 1))


ANSWER = ModelResponse([Text("ok")], ModelStop.end_turn, Usage(1, 1))


@tool
async def slow(n: int) -> str:
    """Takes a minute."""
    await anyio.sleep(60)
    return "late"


@tool(needs_approval=True)
def launch(n: int) -> str:
    """Needs a human."""
    return "launched"


def finished_once(updates: list[Update]) -> None:
    announced = [u.call_id for u in updates if isinstance(u, ToolCallStarted | ApprovalNeeded)]
    done = [u.call_id for u in updates if type(u) is ToolCallFinished]
    assert sorted(set(announced)) == sorted(done)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_calls_the_deadline_cut_short_are_finished_with_the_loop_s_result(backend: str) -> None:
    updates: list[Update] = []
    model = ScriptedModel([reply(ToolCall("a", "slow", {"n": 1})), ANSWER])
    spec = LoopSpec(guards=Guards(deadline_s=5.0))
    run_async(
        lambda: aio.run(spec, "go", model=model, tools=[slow], on_update=updates.append),
        backend=backend,  # type: ignore[arg-type]
    )
    finished_once(updates)
    [done] = [u for u in updates if type(u) is ToolCallFinished]
    assert done.is_error and "deadline" in str(done.content)
    assert updates[-1] == RunFinished(StopReason.deadline, "ok")


def test_a_denied_call_is_announced_then_finished_and_a_waiting_one_only_announced() -> None:
    updates: list[Update] = []
    calls = [ToolCall("x", "launch", {"n": 1}), ToolCall("y", "launch", {"n": 2})]
    sync.run(
        LoopSpec(),
        "go",
        model=ScriptedModel([reply(*calls), ANSWER]),
        tools=[launch],
        approve=lambda c: c.id == "y" or "not x",
        on_update=updates.append,
    )
    finished_once(updates)
    assert [
        type(u).__name__ for u in updates if isinstance(u, (*_TOOL_UPDATES, ApprovalNeeded))
    ] == [
        "ApprovalNeeded",
        "ApprovalNeeded",
        "ToolCallFinished",  # x, denied: the loop's result
        "ToolCallStarted",
        "ToolCallFinished",
    ]
    waiting: list[Update] = []
    run = sync.run(
        LoopSpec(),
        "go",
        model=ScriptedModel([reply(calls[0]), ANSWER]),
        tools=[launch],
        on_update=waiting.append,
    )
    assert run.finish is None
    assert waiting[-1] == ApprovalNeeded(
        "x",
        "launch",
        {"n": 1},
        "Needs a human.",
        launch.spec.parameters,
        "launch needs a person's approval for every call (needs_approval)",
    )


def test_an_approval_needed_carries_what_a_ui_asks_with_and_an_edited_call_starts_edited() -> None:
    updates: list[Update] = []
    run = sync.run(
        LoopSpec(),
        "go",
        model=ScriptedModel([reply(ToolCall("x", "launch", {"n": 1})), ANSWER]),
        tools=[launch],
        approve=lambda c: Edit({"n": 2}),
        on_update=updates.append,
    )
    [asked] = [u for u in updates if type(u) is ApprovalNeeded]
    assert (asked.description, asked.parameters["required"]) == ("Needs a human.", ["n"])
    [started] = [u for u in updates if type(u) is ToolCallStarted]
    assert started.arguments == {"n": 2}  # what runs, where the reply shows the model's call
    assert run.calls() == [("launch", {"n": 1})]
    assert _decode.decode(msgspec.json.encode(asked)) == asked


def test_a_failed_call_and_its_retry_are_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    retries_wait(monkeypatch, 1.5)
    updates: list[Update] = []
    clock = [0.0]
    model = ScriptedModel([ModelError("overloaded", retryable=True, kind="overloaded"), ANSWER])
    sync.run(
        LoopSpec(),
        "hi",
        model=model,
        clock=lambda: clock[0],
        sleep=lambda s: clock.__setitem__(0, clock[0] + s),
        on_update=updates.append,
    )
    assert updates[:5] == [
        ModelCallStarted("model-1"),
        ModelCallFailed("model-1", "overloaded", "overloaded", True),
        ModelRetry("model-2", 1, 1.5),
        ModelCallStarted("model-2"),
        TextDelta(0, "ok"),
    ]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_iterator_gives_what_the_callback_sees(backend: str) -> None:
    def model() -> ScriptedModel:
        return ScriptedModel([reply(ToolCall("a", "nap", {"n": 1})), ANSWER])

    @tool
    async def nap(n: int) -> str:
        """Naps."""
        await anyio.sleep(0.1)
        return "rested"

    called: list[Update] = []
    run_async(
        lambda: aio.run(LoopSpec(), "go", model=model(), tools=[nap], on_update=called.append),
        backend=backend,  # type: ignore[arg-type]
    )

    async def iterate() -> tuple[list[Update], Any]:
        got = []
        async with aio.updates(LoopSpec(), "go", model=model(), tools=[nap]) as stream:
            async for update in stream:
                got.append(update)
        return got, stream.run

    iterated, run = run_async(iterate, backend=backend)  # type: ignore[arg-type]
    assert iterated == called and run.stop_reason is StopReason.completed
    assert iterated[-1] == RunFinished(StopReason.completed, "ok")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_leaving_the_updates_block_early_cancels_the_run(backend: str) -> None:
    async def main() -> Any:
        model = ScriptedModel([reply(ToolCall("a", "slow", {"n": 1})), ANSWER])
        async with aio.updates(LoopSpec(), "go", model=model, tools=[slow]) as stream:
            async for update in stream:
                if type(update) is ToolCallStarted:
                    break
        return stream.run

    run = run_async(main, backend=backend)  # type: ignore[arg-type]
    assert run.stop_reason is StopReason.cancelled
    assert "cancelled" in run.messages[-1].results[0].content


def test_on_event_still_sees_the_journal_s_events_beside_the_updates() -> None:
    events: list[object] = []
    updates: list[Update] = []
    run = sync.run(
        LoopSpec(),
        "go",
        model=ScriptedModel([reply(ToolCall("a", "launch", {"n": 1})), ANSWER]),
        tools=[launch],
        approve=lambda c: True,
        on_event=events.append,
        on_update=updates.append,
    )
    assert events == run.state.events
    assert updates[-1] == RunFinished(StopReason.completed, "ok")


class SyncOnly:
    """A sync client that streams: its deltas come from the worker thread it runs in."""

    def __init__(self) -> None:
        self.scripted = ScriptedModel([ANSWER])
        self.threads: set[int] = set()

    def complete(self, request: Any, *, on_delta: Any = None) -> ModelResponse:
        self.threads.add(threading.get_ident())
        return self.scripted.complete(request, on_delta=on_delta)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_deltas_of_a_sync_client_reach_the_caller_on_the_event_loop_s_thread(backend: str) -> None:
    seen: list[tuple[int, Update]] = []
    model = SyncOnly()

    async def main() -> Any:
        async with aio.updates(LoopSpec(), "hi", model=model) as stream:
            async for update in stream:
                seen.append((threading.get_ident(), update))
        return stream.run

    run = anyio.run(main, backend=backend)
    assert run.stop_reason is StopReason.completed
    assert TextDelta(0, "ok") in [u for _, u in seen]
    assert {thread for thread, _ in seen} == {threading.get_ident()}
    assert threading.get_ident() not in model.threads


class OwnComplete(ScriptedModel):
    """A scripted model whose `complete` was written before deltas."""

    def complete(self, request: Any) -> ModelResponse:  # type: ignore[override]
        return super().complete(request)


def test_a_model_written_without_deltas_still_runs_with_on_update() -> None:
    updates: list[Update] = []
    run = run_async(
        lambda: aio.run(LoopSpec(), "hi", model=OwnComplete([ANSWER]), on_update=updates.append)
    )
    assert run.stop_reason is StopReason.completed
    assert [type(u) for u in updates] == [ModelCallStarted, ModelCallFinished, RunFinished]


@tool
def add(a: int, b: int) -> int:
    """Adds."""
    return a + b


def each_call_started_and_finished_once(run: Any, updates: list[Update]) -> None:
    """Every call in the conversation is shown started and finished, once, as its result is."""
    results = {r.call_id: r for m in run.messages if hasattr(m, "results") for r in m.results}
    started = [u.call_id for u in updates if type(u) is ToolCallStarted]
    finished = {u.call_id: u for u in updates if type(u) is ToolCallFinished}
    made = [
        c.id
        for m in run.messages
        if hasattr(m, "content")
        for c in m.content
        if type(c) is ToolCall
    ]
    assert sorted(started) == sorted(made) == sorted(finished) == sorted(results)
    for call_id, done in finished.items():
        assert (done.content, done.is_error) == (
            results[call_id].content,
            results[call_id].is_error,
        )


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_every_call_the_model_made_is_shown_even_those_the_loop_answers_itself(
    executor: str,
) -> None:
    turns = [
        reply(
            ToolCall("a", "nope", {}),  # an unknown tool
            ToolCall("b", "add", {}, raw_arguments="{a: 1"),  # arguments that are not JSON
            ToolCall("c", "add", {"a": 1, "b": 2}),
            ToolCall("c", "add", {"a": 3, "b": 4}),  # an id the reply already gave
        ),
        reply(ToolCall("d", "add", {"a": 1, "b": 2}), ToolCall("d2", "add", {"a": 1, "b": 2})),
        ModelResponse([ToolCall("e", "add", {"a": 1, "b": 1})], ModelStop.refusal, Usage(1, 1)),
    ]
    updates: list[Update] = []
    spec = LoopSpec(guards=Guards(max_repeated_calls=2))  # d repeats c: the run stops
    if executor == "sync":
        run = sync.run(
            spec, "go", model=ScriptedModel(turns), tools=[add], on_update=updates.append
        )
    else:
        run = run_async(
            lambda: aio.run(
                spec, "go", model=ScriptedModel(turns), tools=[add], on_update=updates.append
            ),
            backend=executor,  # type: ignore[arg-type]
        )
    assert run.stop_reason is StopReason.repeated_call
    each_call_started_and_finished_once(run, updates)
    refused = ScriptedModel([turns[2]])
    updates = []
    run = sync.run(LoopSpec(), "go", model=refused, tools=[add], on_update=updates.append)
    assert run.stop_reason is StopReason.refusal
    each_call_started_and_finished_once(run, updates)


@pytest.mark.parametrize("executor", ["sync", "asyncio"])
def test_a_sandboxed_run_shows_the_calls_the_loop_answers_itself(executor: str) -> None:
    turns = [
        reply(ToolCall("a", "nope", {}), ToolCall("b", "get_weather", {"city": "北京"})),
        ANSWER,
    ]
    updates: list[Update] = []
    with Sandbox(TOOLS, SandboxLimits(wall_s=20)) as box:
        if executor == "sync":
            run = sync.run(
                LoopSpec(), "go", model=ScriptedModel(turns), tools=box, on_update=updates.append
            )
        else:
            run = run_async(
                lambda: aio.run(
                    LoopSpec(),
                    "go",
                    model=ScriptedModel(turns),
                    tools=box,
                    on_update=updates.append,
                )
            )
    assert run.stop_reason is StopReason.completed
    each_call_started_and_finished_once(run, updates)


def calling(*calls: ToolCall) -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(list(calls), ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )


class Gone(Exception):
    """The page that read the updates went away."""


@tool
async def nap(n: int) -> str:
    """Naps a tenth of a second."""
    await anyio.sleep(0.1)
    return "rested"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_error_in_the_updates_block_is_raised_as_it_is_and_the_run_cancelled(
    backend: str,
) -> None:
    async def main() -> Any:
        model = calling(ToolCall("a", "nap", {"n": 1}), ToolCall("b", "nap", {"n": 2}))
        with pytest.raises(Gone):
            async with aio.updates(LoopSpec(), "go", model=model, tools=[nap]) as stream:
                async for update in stream:
                    if type(update) is ToolCallStarted:
                        raise Gone
        return stream.run

    run = run_async(main, backend=backend)  # type: ignore[arg-type]
    assert run.stop_reason is StopReason.cancelled
    validate_history(run.messages)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_error_of_the_run_is_raised_from_the_updates_block_as_it_is(backend: str) -> None:
    async def main() -> list[Any]:
        seen: list[Any] = []
        with pytest.raises(TypeError, match="needs an AsyncModelClient"):
            async with aio.updates(LoopSpec(), "go", model=object()) as stream:
                async for update in stream:
                    seen.append(update)
        return seen

    assert run_async(main, backend=backend) == []  # type: ignore[arg-type]


class StreamsOn:
    """A sync client that streams one delta, then another once told to (after the run that
    asked for it is over): its thread, abandoned, goes on."""

    def __init__(self) -> None:
        self.go_on = threading.Event()
        self.done = threading.Event()

    def complete(self, request: Any, *, on_delta: Any = None) -> ModelResponse:
        try:
            on_delta(TextDelta(0, "early"))
            self.go_on.wait(10)
            with contextlib.suppress(Exception):
                on_delta(TextDelta(0, "late"))
        finally:
            self.done.set()
        return ModelResponse([Text("late")], ModelStop.end_turn, Usage(1, 1))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_abandoned_sync_model_call_shows_nothing_after_the_run_finished(backend: str) -> None:
    model = StreamsOn()
    seen: list[Any] = []

    async def main() -> Any:
        with anyio.CancelScope() as scope:

            def show(update: Any) -> None:
                seen.append(update)
                if type(update) is TextDelta:
                    scope.cancel()

            run = await aio.run(LoopSpec(), "hi", model=model, on_update=show)
        model.go_on.set()
        await anyio.to_thread.run_sync(model.done.wait, 10)  # the event loop still runs
        return run

    run = anyio.run(main, backend=backend)
    assert run.stop_reason is StopReason.cancelled
    assert seen[-1] == RunFinished(StopReason.cancelled)
