"""Bad input for issue 17's parts: deps that cannot cross or change between runs, MCP servers
that answer malformed content or page forever."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import anyio
import mcp.types
import pytest
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from turnstile.core import LoopSpec, ModelFailed, StopReason, tool
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
    Usage,
    validate_history,
)
from turnstile.executors import RunFinished, ScriptedModel, ToolCallStarted, aio, sync
from turnstile.executors.mcp import MCPTools
from turnstile.executors.sandbox import Sandbox, SandboxLimits, UnsendableDeps
from turnstile.executors.testing import run_async
from turnstile.providers import TextDelta

CONTEXT_TOOLS = ["tests.executors.context_tools:what_deps"]


def calling(*calls: ToolCall) -> ScriptedModel:
    return ScriptedModel(
        [
            ModelResponse(list(calls), ModelStop.tool_use, Usage(1, 1)),
            ModelResponse([Text("done")], ModelStop.end_turn, Usage(1, 1)),
        ]
    )


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


def test_an_mcp_image_that_is_not_base64_is_an_error_result() -> None:
    server = MCPServer("bad pictures")

    @server.tool()
    def picture() -> list[mcp.types.ImageContent]:
        """A picture whose data is not base64."""
        return [mcp.types.ImageContent(data="abc", mime_type="image/png")]

    with MCPTools(server) as tools:
        content, is_error = tools.run("picture", {})
    assert is_error and "picture" in str(content)


def test_a_server_whose_tool_list_pages_forever_is_refused() -> None:
    pages = 0

    async def list_tools(ctx: Any, params: Any) -> mcp.types.ListToolsResult:
        nonlocal pages
        pages += 1  # a bound, so the test fails rather than hangs without the check
        listed = mcp.types.Tool(name="echo", input_schema={"type": "object"})
        return mcp.types.ListToolsResult(
            tools=[listed], next_cursor="again" if pages < 50 else None
        )

    server = Server("loops", on_list_tools=list_tools)
    with pytest.raises(ConnectionError, match="pages in a loop \\(cursor 'again'"):
        MCPTools(server).__enter__()
    assert pages == 2


def test_a_server_that_fails_to_list_its_tools_is_a_connection_error() -> None:
    async def list_tools(ctx: Any, params: Any) -> mcp.types.ListToolsResult:
        raise RuntimeError("the catalogue is down")

    with pytest.raises(ConnectionError, match=r"MCP server .*: MCPError: Internal server error"):
        MCPTools(Server("broken", on_list_tools=list_tools)).__enter__()


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
