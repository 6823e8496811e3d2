"""A tool's per-run context: its call id and the caller's deps, which reach the tools that ask
for them and nothing else: not the model, not the journal, not a dump; in a sandbox, only what
is declared to cross, as plain data."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from turnstile.core import LoopSpec, ToolContext, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults, Usage
from turnstile.executors import ScriptedModel, sync
from turnstile.executors.sandbox import Sandbox, SandboxLimits, UnsendableDeps

from .context_tools import User

TOOLS = ["tests.executors.context_tools:whoami", "tests.executors.context_tools:what_deps"]


def model(*calls: ToolCall) -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(list(calls), ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )


def test_a_typed_context_is_never_in_the_schema_and_says_its_deps_type() -> None:
    @tool
    def whoami(greeting: str, context: ToolContext[User]) -> str:
        """Greets."""
        return greeting

    assert list(whoami.spec.parameters["properties"]) == ["greeting"]
    assert whoami.deps_type is User


class Connection:
    """What a caller might hand its tools: a live object, with a secret in it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.token = "s3cr3t-token"


def test_deps_reach_the_tool_in_process_and_nowhere_else(tmp_path: Path) -> None:
    @tool
    def locked(n: int, context: ToolContext[Connection]) -> str:
        """Uses the run's connection."""
        with context.deps.lock:
            return f"{context.call_id} held it"

    client = model(ToolCall("c1", "locked", {"n": 1}))
    journal = tmp_path / "run.journal"
    run = sync.run(
        LoopSpec(), "go", model=client, tools=[locked], deps=Connection(), journal=journal
    )
    assert run.messages[2].results[0].content == "c1 held it"
    assert b"s3cr3t" not in journal.read_bytes()
    assert b"s3cr3t" not in run.loop.dump()
    assert all("s3cr3t" not in repr(r) for r in client.requests)


def test_without_a_declaration_no_deps_cross_to_the_sandbox() -> None:
    """The run's deps may hold secrets and handles: untrusted code gets none of them unless
    the sandbox says what crosses, and deps that could not cross do not stop the run."""
    client = model(ToolCall("c1", "what_deps", {}))
    with Sandbox(TOOLS, SandboxLimits(wall_s=20)) as box:
        run = sync.run(LoopSpec(), "go", model=client, tools=box, deps=threading.Lock())
    assert run.messages[2].results[0].content == "None"


def test_in_the_sandbox_the_deps_cross_as_the_type_the_tool_asks_for() -> None:
    client = model(ToolCall("c1", "whoami", {"greeting": "你好"}), ToolCall("c2", "what_deps", {}))
    with Sandbox(TOOLS, SandboxLimits(wall_s=20), deps=lambda d: d) as box:
        run = sync.run(LoopSpec(), "go", model=client, tools=box, deps=User(7, "Ada"))
    assert [r.content for r in run.messages[2].results] == [
        "你好, Ada (7), in c1",
        "{'id': 7, 'name': 'Ada'}",  # untyped: plain data
    ]


def test_a_sandbox_declares_what_of_the_deps_crosses() -> None:
    class App:
        """What a web app would pass: a connection beside the user."""

        def __init__(self) -> None:
            self.db = threading.Lock()
            self.user = User(7, "Ada")

    client = model(ToolCall("c1", "whoami", {"greeting": "hi"}))
    with Sandbox(TOOLS, SandboxLimits(wall_s=20), deps=lambda app: app.user) as box:
        run = sync.run(LoopSpec(), "go", model=client, tools=box, deps=App())
    assert run.messages[2].results[0].content == "hi, Ada (7), in c1"


def test_deps_that_cannot_cross_are_refused_before_the_run_starts() -> None:
    client = model(ToolCall("c1", "whoami", {"greeting": "hi"}))
    with Sandbox(TOOLS, SandboxLimits(wall_s=20), deps=lambda d: d) as box:
        with pytest.raises(UnsendableDeps, match="deps of type lock cannot cross"):
            sync.run(LoopSpec(), "go", model=client, tools=box, deps=threading.Lock())
    assert client.requests == []  # nothing ran


def test_deps_of_the_wrong_shape_are_the_tool_s_error_result() -> None:
    client = model(ToolCall("c1", "whoami", {"greeting": "hi"}))
    with Sandbox(TOOLS, SandboxLimits(wall_s=20), deps=lambda d: d) as box:
        run = sync.run(LoopSpec(), "go", model=client, tools=box, deps={"id": "seven"})
    result = run.messages[2].results[0]
    assert result.is_error and "whoami's deps do not convert" in result.content


def calling(*calls: ToolCall) -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(list(calls), ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )


CONTEXT_TOOLS = ["tests.executors.context_tools:what_deps"]


def test_recursive_deps_are_refused_as_unsendable() -> None:
    deps: dict[str, Any] = {}
    deps["self"] = deps
    with Sandbox(CONTEXT_TOOLS, SandboxLimits(wall_s=20), deps=lambda d: d) as box:
        with pytest.raises(UnsendableDeps, match="deps of type dict cannot cross"):
            sync.run(LoopSpec(), "go", model=calling(), tools=box, deps=deps)


def test_each_run_sends_its_deps_as_they_are_when_it_starts() -> None:
    """The same dict, changed between two runs on one sandbox: each run's tool sees it as it
    was given to that run, not as the sandbox first encoded it."""
    deps = {"user": "ada"}
    seen = []
    with Sandbox(CONTEXT_TOOLS, SandboxLimits(wall_s=20), deps=lambda d: d) as box:
        for user in ("ada", "bob"):
            deps["user"] = user
            model = calling(ToolCall("c1", "what_deps", {}))
            run = sync.run(LoopSpec(), "go", model=model, tools=box, deps=deps)
            [results] = [m for m in run.messages if type(m) is ToolResults]
            seen.append(results.results[0].content)
    assert seen == ["{'user': 'ada'}", "{'user': 'bob'}"]
