"""The sync executor carries out the loop's commands and nothing more."""

from __future__ import annotations

import asyncio
import itertools

import msgspec
import pytest
from turnstile.core import (
    Guards,
    Loop,
    LoopSpec,
    ModelError,
    ModelRequest,
    StopReason,
    ToolOutcome,
    ToolSpec,
    tool,
)
from turnstile.core.guardrails import FinalAnswer, guardrail
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    Usage,
    UserMessage,
    validate_history,
)
from turnstile.executors import Failure, RunFailed, ScriptedModel, Session, Toolbox, sync
from turnstile.providers import anthropic_messages

from .backoff import retries_wait


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


def calls(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(list(calls), ModelStop.tool_use, Usage(10, 5))


def text(t: str) -> ModelResponse:
    return ModelResponse([Text(t)], ModelStop.end_turn, Usage(10, 5))


def test_a_spec_without_tools_gets_the_toolbox_s() -> None:
    model = ScriptedModel([calls(ToolCall("c", "add", {"a": 2, "b": 3})), text("5")])
    run = sync.run(LoopSpec(), "2+3?", model=model, tools=[add])
    assert run.stop_reason is StopReason.completed and run.output == "5"
    assert [t.name for t in model.requests[0].tools] == ["add"]
    assert run.messages[2].results[0].content == "5"


def test_bad_arguments_and_unknown_tools_reach_the_model_as_errors() -> None:
    model = ScriptedModel(
        [
            calls(ToolCall("x", "add", {"a": "two", "b": 3}), ToolCall("y", "mul", {"a": 1})),
            text("sorry"),
        ]
    )
    run = sync.run(LoopSpec(), "?", model=model, tools=[add])
    x, y = run.messages[2].results
    assert x.is_error and "invalid arguments for add" in x.content
    assert y.is_error and "unknown tool 'mul'" in y.content


def test_a_model_client_that_crashes_ends_the_run_with_its_state_intact() -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("bug in the client")

    run = sync.run(LoopSpec(), "hi", model=ScriptedModel(broken), tools=[])
    assert run.stop_reason is StopReason.model_error
    assert run.state.events[-1].message == "RuntimeError: bug in the client"
    validate_history(run.messages)


@tool
def gives_up(n: int) -> str:
    """Raises asyncio's cancel, as code that ran an event loop of its own might."""
    raise asyncio.CancelledError


def test_a_tool_raising_a_cancel_is_an_error_result_and_the_run_goes_on() -> None:
    model = ScriptedModel([calls(ToolCall("x", "gives_up", {"n": 1})), text("sorry")])
    run = sync.run(LoopSpec(), "?", model=model, tools=[gives_up])
    assert run.stop_reason is StopReason.completed and run.output == "sorry"
    [result] = run.messages[2].results
    assert result.is_error and result.content == "gives_up failed: CancelledError"


def test_a_model_client_raising_a_cancel_is_a_failed_model_call() -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise asyncio.CancelledError

    run = sync.run(LoopSpec(), "hi", model=ScriptedModel(broken), tools=[])
    assert run.stop_reason is StopReason.model_error
    assert run.state.events[-1].message.startswith("CancelledError")
    validate_history(run.messages)


def test_model_errors_are_retried_by_the_loop() -> None:
    script = [ModelError("overloaded", retryable=True), text("fine")]
    run = sync.run(LoopSpec(guards=Guards(max_model_retries=1)), "hi", model=ScriptedModel(script))
    assert run.stop_reason is StopReason.completed and run.state.model_calls == 2


def test_approvals_wait_then_resume_from_a_dump() -> None:
    spec = LoopSpec(tools=(delete.spec,))
    model = ScriptedModel([calls(ToolCall("d", "delete", {"path": "/tmp/x"})), text("done")])
    first = sync.run(spec, "clean up", model=model, tools=[delete])
    assert first.finish is None and [c.id for c in first.waiting] == ["d"]
    loop = Loop.load(spec, first.loop.dump())
    resumed = sync.run(spec, model=model, tools=[delete], loop=loop, approve=lambda c: True)
    assert resumed.stop_reason is StopReason.completed
    assert resumed.messages[2].results[0].content == "deleted /tmp/x"


def test_a_denial_reaches_the_model() -> None:
    spec = LoopSpec(tools=(delete.spec,))
    model = ScriptedModel([calls(ToolCall("d", "delete", {"path": "/"})), text("ok")])
    run = sync.run(spec, "rm", model=model, tools=[delete], approve=lambda c: "not the root")
    result = run.messages[2].results[0]
    assert result.is_error and "not the root" in result.content


def test_a_resumed_clock_continues_from_the_last_event() -> None:
    spec = LoopSpec(tools=(delete.spec,), guards=Guards(deadline_s=50.0))
    model = ScriptedModel([calls(ToolCall("d", "delete", {"path": "x"})), text("done")])
    ticks = iter([0.0, 10.0])
    first = sync.run(spec, "go", model=model, tools=[delete], clock=lambda: next(ticks))
    later = itertools.count(1_000_000.0)
    run = sync.run(
        spec,
        model=model,
        tools=[delete],
        loop=first.loop,
        approve=lambda c: True,
        clock=lambda: next(later),
    )
    assert run.stop_reason is StopReason.completed  # a week at rest did not trip the deadline
    events = [(type(e).__name__, e.now) for e in run.state.events]
    assert events == [
        *[("Started", 0.0), ("ModelReplied", 10.0), ("Resumed", 11.0), ("Approved", 12.0)],
        *[("ToolStarted", 13.0), ("ToolReturned", 14.0), ("ModelReplied", 15.0)],
    ]


def test_tools_the_model_is_told_of_must_have_an_implementation() -> None:
    with pytest.raises(ValueError, match="without an implementation: ghost"):
        sync.run(LoopSpec(tools=(ToolSpec("ghost"),)), "hi", model=ScriptedModel([]), tools=[add])


def test_a_toolbox_refuses_two_tools_with_one_name() -> None:
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        Toolbox([add, add])


def test_on_step_sees_every_command_and_observation() -> None:
    seen: list[str] = []
    model = ScriptedModel([text("hi")])
    sync.run(LoopSpec(), "hi", model=model, on_step=lambda s: seen.append(type(s).__name__))
    assert seen == ["CallModel", "ModelReplied", "Finish"]


def test_a_runner_without_specs_is_told_what_it_lacks() -> None:
    class Runner:
        def run(self, name: str, arguments: dict[str, object]) -> ToolOutcome:
            return ToolOutcome("ok")

    with pytest.raises(TypeError, match="has run\\(\\) but no specs"):
        sync.run(LoopSpec(), "hi", model=ScriptedModel([]), tools=Runner())  # type: ignore[arg-type]


def test_a_model_failure_keeps_its_kind_and_the_wait_the_provider_asked_for() -> None:
    limited = ModelError("slow down", kind="rate_limit_error", retry_after=1.5)
    run = sync.run(LoopSpec(), "hi", model=ScriptedModel([limited]))
    failed = run.state.events[-1]
    assert (failed.kind, failed.retry_after, failed.retryable) == ("rate_limit_error", 1.5, False)


def test_a_function_is_not_a_model_client() -> None:
    def reply(request: ModelRequest) -> ModelResponse:
        return text("hi")

    expected = r"needs a ModelClient.*complete\(request\).*function reply"
    with pytest.raises(TypeError, match=expected):
        sync.run(LoopSpec(), "hi", model=reply)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ScriptedModel\(reply\)"):
        sync.run(LoopSpec(), "hi", model=reply)  # type: ignore[arg-type]


def test_an_async_client_is_refused_by_the_sync_executor_before_the_run_starts() -> None:
    anthropic = pytest.importorskip("anthropic")
    over_async_sdk = anthropic_messages.Client(anthropic.AsyncAnthropic(api_key="unused"))

    class OnlyAsync:
        async def acomplete(self, request: ModelRequest) -> ModelResponse:
            return text("hi")

    for model in (over_async_sdk, OnlyAsync()):
        with pytest.raises(TypeError, match=r"is async.*turnstile\.executors\.aio"):
            sync.run(LoopSpec(), "hi", model=model)  # type: ignore[arg-type]


class FakeTime:
    """A clock and a sleep for it: sleeping moves the clock on, at once."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_retry_is_not_sent_before_the_time_the_loop_set(monkeypatch: pytest.MonkeyPatch) -> None:
    retries_wait(monkeypatch, 1.5)
    time = FakeTime(100.0)
    model = ScriptedModel([ModelError("overloaded", retryable=True), text("fine")])
    spec = LoopSpec(guards=Guards(max_model_retries=1))
    run = sync.run(spec, "hi", model=model, clock=time.clock, sleep=time.sleep)
    assert run.stop_reason is StopReason.completed
    assert time.slept == [1.5]
    assert [e.now for e in run.state.events] == [100.0, 100.0, 101.5]


def test_a_time_already_past_is_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    retries_wait(monkeypatch, -1.0)
    time = FakeTime(0.0)
    model = ScriptedModel([ModelError("overloaded", retryable=True), text("fine")])
    spec = LoopSpec(guards=Guards(max_model_retries=1))
    sync.run(spec, "hi", model=model, clock=time.clock, sleep=time.sleep)
    assert time.slept == []


def test_call_model_calls_at_once_for_waiting_is_the_sessions() -> None:
    [command] = Loop(LoopSpec()).start("hi", now=0.0)
    later = msgspec.structs.replace(command, not_before=30.0)
    reply = sync.call_model(ScriptedModel([text("fine")]), later, lambda: 0.0)
    assert reply.now == 0.0 and reply.command_id == command.id
    session = Session(LoopSpec(), "hi", clock=lambda: 12.0)
    assert session.wait(later) == 18.0 and session.wait(command) == 0.0


def test_a_prompt_starts_an_idle_loop() -> None:
    run = sync.run(LoopSpec(), "hi", model=ScriptedModel([text("hello")]), loop=Loop(LoopSpec()))
    assert run.stop_reason is StopReason.completed and run.output == "hello"


def test_an_idle_loop_needs_a_prompt() -> None:
    with pytest.raises(ValueError, match="has not started: give it a prompt"):
        sync.run(LoopSpec(), model=ScriptedModel([]), loop=Loop(LoopSpec()))


def test_a_loop_still_waiting_is_resumed_without_a_prompt() -> None:
    spec = LoopSpec(tools=(delete.spec,))
    model = ScriptedModel([calls(ToolCall("d", "delete", {"path": "/tmp/x"})), text("done")])
    first = sync.run(spec, "clean up", model=model, tools=[delete])
    before = first.loop.dump()
    with pytest.raises(
        ValueError, match=r"still waits on d \(delete\): resume it without a prompt"
    ):
        sync.run(spec, "and more", model=model, tools=[delete], loop=first.loop)
    assert first.loop.dump() == before


def test_a_prompt_continues_a_finished_conversation() -> None:
    model = ScriptedModel([text("Paris"), text("Berlin")])
    first = sync.run(LoopSpec(), "The capital of France?", model=model)
    run = sync.run(LoopSpec(), "And of Germany?", model=model, loop=first.loop)
    assert run.stop_reason is StopReason.completed and run.output == "Berlin"
    assert [m.content for m in model.requests[1].messages if type(m) is UserMessage] == [
        "The capital of France?",
        "And of Germany?",
    ]


def test_a_run_s_output_is_the_typed_answer() -> None:
    class Answer(msgspec.Struct):
        city: str

    model = ScriptedModel([calls(ToolCall("a", "final_answer", {"city": "上海"}))])
    run = sync.run(LoopSpec(output=Answer), "which city?", model=model)
    assert run.output == Answer("上海") and run.finish.output == Answer("上海")


def test_a_failed_run_says_why_in_its_error_and_a_loaded_or_replayed_one_the_same() -> None:
    denied = ModelError(
        "authentication_error: invalid x-api-key (HTTP 401)",
        kind="authentication_error",
        status=401,
        model="claude-x",
    )
    run = sync.run(LoopSpec(), "hi", model=ScriptedModel([denied]))
    assert run.stop_reason is StopReason.model_error and run.output is None
    why = Failure(
        StopReason.model_error,
        "authentication_error",
        "authentication_error: invalid x-api-key (HTTP 401)",
        status=401,
        retryable=False,
        model="claude-x",
    )
    assert run.error == why
    with pytest.raises(RunFailed) as raised:
        run.raise_for_error()
    assert raised.value.error == why and "invalid x-api-key (HTTP 401)" in str(raised.value)
    loaded = Loop.load(LoopSpec(), run.loop.dump())
    assert sync.run(LoopSpec(), model=ScriptedModel([]), loop=loaded).error == why
    replayed = Loop.replay(LoopSpec(), run.state.events)
    assert sync.run(LoopSpec(), model=ScriptedModel([]), loop=replayed).error == why


def test_a_run_that_did_not_fail_has_no_error_and_raise_for_error_gives_it_back() -> None:
    run = sync.run(LoopSpec(), "hi", model=ScriptedModel([text("hello")]))
    assert run.error is None and run.raise_for_error() is run


def test_a_tripped_guardrail_is_a_failure_naming_the_check_so_no_dict_passes_for_the_answer() -> (
    None
):
    @guardrail(on="final")
    def polite(answer: FinalAnswer) -> str | None:
        return "rude" if "hello" in answer.text else None

    spec = LoopSpec(guardrails=[polite])
    run = sync.run(spec, "hi", model=ScriptedModel([text("hello")]), guardrails=[polite])
    assert run.stop_reason is StopReason.guardrail
    assert run.error == Failure(
        StopReason.guardrail, "polite", "the guardrail polite (final) tripped: rude"
    )
    with pytest.raises(RunFailed, match="polite"):
        run.raise_for_error()


def test_tools_that_keep_failing_and_answers_that_stay_invalid_are_failures_too() -> None:
    broken = [calls(ToolCall(f"c{i}", "mul", {})) for i in range(3)] + [text("gave up")]
    run = sync.run(LoopSpec(), "hi", model=ScriptedModel(broken), tools=[add])
    assert run.stop_reason is StopReason.tool_errors
    assert run.error is not None and run.error.kind == "tool_errors"
    assert "unknown tool 'mul'" in run.error.message

    class Answer(msgspec.Struct):
        city: str

    vague = ScriptedModel([text("somewhere")] * 3)
    run = sync.run(LoopSpec(output=Answer), "which city?", model=vague)
    assert run.stop_reason is StopReason.invalid_output
    assert run.error is not None and run.error.kind == "invalid_output"
    with pytest.raises(RunFailed):
        run.raise_for_error()


def test_a_call_the_deadline_closed_before_it_started_is_not_run() -> None:
    clock = [0.0]
    ran: list[int] = []

    @tool
    def slow(n: int) -> str:
        """Takes 100 s."""
        ran.append(n)
        clock[0] += 100
        return "done"

    model = ScriptedModel(
        [calls(ToolCall("a", "slow", {"n": 1}), ToolCall("b", "slow", {"n": 2})), text("late")]
    )
    spec = LoopSpec(guards=Guards(deadline_s=50))
    run = sync.run(spec, "go", model=model, tools=[slow], clock=lambda: clock[0])
    assert run.stop_reason is StopReason.deadline and ran == [1]
    assert run.messages[2].results[1].is_error
    validate_history(run.messages)
