"""`Agent`: a spec, its model and its tools as one value, which every executor takes in place of
the spec; a model string in it builds its client when the run starts."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import anthropic
import pytest
from turnstile.core import InvalidSpec, LoopSpec, StopReason, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import Agent, ScriptedModel, Toolbox, aio, sync, transcript
from turnstile.executors.temporal import start
from turnstile.executors.temporal._wire import decode_input
from turnstile.executors.testing import run_async
from turnstile.providers import MissingAPIKey
from turnstile.providers.replay import RecordedTools, client_for, load_trace, prompt_for, spec_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(
                [ToolCall("c1", "add", {"a": 2, "b": 3})], ModelStop.tool_use, Usage(10, 5)
            ),
            ModelResponse([Text("5")], ModelStop.end_turn, Usage(20, 1)),
        ]
    )


def test_an_agent_runs_as_its_parts_do_in_sync_and_aio() -> None:
    spec = LoopSpec(system="Add.")
    by_parts = sync.run(spec, "2+3?", model=script(), tools=[add])
    agent = Agent(spec, model=script(), tools=[add])
    assert transcript(sync.run(agent, "2+3?").state) == transcript(by_parts.state)
    ran = run_async(lambda: aio.run(Agent(spec, model=script(), tools=[add]), "2+3?"))
    assert transcript(ran.state) == transcript(by_parts.state)
    assert ran.finish is not None and ran.finish.reason is StopReason.completed


def test_aio_updates_take_an_agent() -> None:
    async def updated() -> list[str]:
        agent = Agent(LoopSpec(system="Add."), model=script(), tools=[add])
        async with aio.updates(agent, "2+3?") as stream:
            return [type(update).__name__ async for update in stream]

    seen = run_async(updated)
    assert "ToolCallFinished" in seen and seen[-1] == "RunFinished"


def test_an_agent_is_a_frozen_value() -> None:
    tools = [add]
    agent = Agent(model="openai:gpt-4.1", tools=tools)
    tools.append(add)
    assert agent.tools == (add,) and agent.spec == LoopSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.model = "openai:gpt-5"  # type: ignore[misc]
    box = Toolbox([add])
    assert Agent(model="openai:gpt-4.1", tools=box).tools is box  # a runner stays itself
    with pytest.raises(TypeError, match="takes a LoopSpec, not str"):
        Agent("Add.", model="openai:gpt-4.1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "conflict"),
    [
        ({"model": ScriptedModel([])}, "the agent has its model already: give model= to"),
        ({"tools": [add]}, "the agent has its tools already: give tools= to"),
        (
            {"model": ScriptedModel([]), "tools": [add]},
            "the agent has its model and tools already: give model= and tools= to",
        ),
    ],
)
def test_an_agent_given_its_model_or_tools_again_is_a_type_error(
    given: dict[str, Any], conflict: str
) -> None:
    agent = Agent(model=script(), tools=[add])
    with pytest.raises(TypeError, match=conflict):
        sync.run(agent, "2+3?", **given)
    with pytest.raises(TypeError, match=conflict):
        run_async(lambda: aio.run(agent, "2+3?", **given))


def test_a_spec_without_a_model_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="the run needs a model"):
        sync.run(LoopSpec(), "hi")


def test_a_model_string_is_built_from_the_environment_when_the_run_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = load_trace(FIXTURES / "anthropic/weather.stream.json")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    replays = iter([client_for(trace).sdk, client_for(trace).sdk])
    areplay = client_for(trace, sync=False).sdk
    monkeypatch.setattr(anthropic, "Anthropic", lambda: next(replays))
    monkeypatch.setattr(anthropic, "AsyncAnthropic", lambda: areplay)
    agent = Agent(spec_for(trace), model="anthropic:claude-sonnet-4-5", tools=RecordedTools(trace))
    ran = sync.run(agent, prompt_for(trace))
    assert ran.finish is not None and ran.finish.reason is StopReason.completed
    agent = dataclasses.replace(agent, tools=RecordedTools(trace))
    ran_async = run_async(lambda: aio.run(agent, prompt_for(trace)))
    assert transcript(ran_async.state) == transcript(ran.state)
    # and a string given to the run itself, in place of a client
    again = sync.run(spec_for(trace), prompt_for(trace), model="anthropic:claude-sonnet-4-5",
                     tools=RecordedTools(trace))  # fmt: skip
    assert transcript(again.state) == transcript(ran.state)


def test_a_model_string_whose_key_is_missing_fails_before_the_run_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    journal = tmp_path / "run.journal"
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY is not set"):
        sync.run(Agent(model="openai:gpt-4.1"), "hi", journal=journal)
    assert not journal.exists()
    with pytest.raises(InvalidSpec, match="names no provider"):
        sync.run(Agent(model="gemini:gemini-2.5-pro"), "hi")


class FakeTemporal:
    """Stands for a Temporal client: keeps what a workflow would be started with."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    async def start_workflow(self, *args: Any, **kwargs: Any) -> object:
        self.started.append((args, kwargs))
        return object()


def test_temporal_starts_an_agent_by_its_model_string_with_its_tools_named() -> None:
    client = FakeTemporal()
    agent = Agent(LoopSpec(system="Add."), model="openai:gpt-4.1", tools=[add])
    handle = asyncio.run(start(client, agent, "2+3?", id="run-1"))  # type: ignore[arg-type]
    [(_, kwargs)] = client.started
    given = decode_input(kwargs["args"][0])
    assert given.model == "openai:gpt-4.1" and kwargs["id"] == "run-1"
    assert [t.name for t in given.spec.tools] == ["add"]  # a worker without it refuses the run
    assert given.spec.system == "Add." and handle.spec == given.spec


@pytest.mark.parametrize(
    ("agent", "given", "message"),
    [
        (Agent(model=ScriptedModel([])), {}, "a Temporal run names its model"),
        (Agent(model="openai:gpt-4.1"), {"model": "gpt"}, "the agent has its model already"),
    ],
)
def test_temporal_refuses_an_agent_whose_model_cannot_travel_or_comes_twice(
    agent: Agent, given: dict[str, Any], message: str
) -> None:
    client = FakeTemporal()
    with pytest.raises(TypeError, match=message):
        asyncio.run(start(client, agent, "hi", id="run-1", **given))  # type: ignore[arg-type]
    assert client.started == []


def test_model_strings_in_the_spec_s_models_are_asked_through_clients_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fallback on another provider: each model string of `LoopSpec.models` gets its client
    from the environment, so a run needs no `model=` when all of them are model strings."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    spec = LoopSpec(models=("deepseek:deepseek-reasoner", "anthropic:claude-sonnet-4-5"))
    with pytest.raises(MissingAPIKey, match="DEEPSEEK_API_KEY is not set"):
        sync.run(spec, "hi")  # not "the run needs a model": the fallback's client is built
    with pytest.raises(MissingAPIKey, match="DEEPSEEK_API_KEY is not set"):
        sync.run(spec, "hi", model="anthropic:claude-sonnet-4-5")
    with pytest.raises(TypeError, match="the run needs a model"):
        sync.run(LoopSpec(models=("deepseek:deepseek-reasoner", "gpt-4.1")), "hi")
