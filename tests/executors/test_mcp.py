"""MCP servers' tools as a run's tools: in process, over stdio and over streamable HTTP (to an
ASGI app, no socket), through the sync and trio executors; errors and structured content as
the model reads them; a replay with the server gone decides the same, because the run recorded
the tool list."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp.types
import msgspec
import pytest
import trio
from mcp import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from turnstile.core import Loop, LoopSpec, ProtocolError, Started
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, ToolResults, Usage
from turnstile.executors import Journal, ScriptedModel, cli, sync
from turnstile.executors import aio as trio_executor
from turnstile.executors.mcp import MCPTools

from .mcp_server import server

ROOT = Path(__file__).resolve().parents[2]
SPEC = LoopSpec(system="你是一个天气助手。")  # no tools of its own: the server's
PROMPT = "北京和上海哪个更暖和?"


def replies() -> list[ModelResponse]:
    ask = ModelResponse(
        [
            ToolCall("c1", "get_weather", {"city": "北京"}),
            ToolCall("c2", "get_weather", {"city": "火星"}),
        ],
        ModelStop.tool_use,
        Usage(512, 121),
    )
    return [ask, ModelResponse([Text("北京 26 度。")], ModelStop.end_turn, Usage(293, 30))]


def results(run_messages: list[object]) -> list[tuple[str, bool]]:
    [round_] = [m for m in run_messages if type(m) is ToolResults]
    return [(r.content, r.is_error) for r in round_.results]


EXPECTED = [
    ('{"温度":26,"天气":"晴"}', False),
    ("Error executing tool get_weather: 没有 火星 的天气数据", True),
]


def test_the_server_s_tools_are_listed_as_specs() -> None:
    with MCPTools(server) as tools:
        by_name = {s.name: s for s in tools.specs}
    assert sorted(by_name) == ["get_weather", "save_note"]
    weather = by_name["get_weather"]
    assert weather.description == "查询城市的实时天气"
    assert weather.parameters["required"] == ["city"]
    assert weather.replay_safe and not by_name["save_note"].replay_safe  # read-only hint


def test_a_sync_run_in_process_gets_structured_content_and_error_results() -> None:
    model = ScriptedModel(replies())
    with MCPTools(server) as tools:
        run = sync.run(SPEC, PROMPT, model=model, tools=tools)
    assert run.stop_reason.value == "completed"
    assert results(run.messages) == EXPECTED
    assert [t.name for t in model.requests[0].tools] == ["get_weather", "save_note"]


def test_a_trio_run_in_process() -> None:
    model = ScriptedModel(replies())
    with MCPTools(server) as tools:
        run = trio.run(lambda: trio_executor.run(SPEC, PROMPT, model=model, tools=tools))
    assert results(run.messages) == EXPECTED


def test_a_sync_run_over_stdio() -> None:
    stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.executors.mcp_server"], cwd=str(ROOT)
    )
    with MCPTools(stdio) as tools:
        run = sync.run(SPEC, PROMPT, model=ScriptedModel(replies()), tools=tools)
    assert results(run.messages) == EXPECTED


@contextlib.asynccontextmanager
async def over_http() -> AsyncIterator[Any]:
    """Streamable HTTP to the server's own ASGI app, in process: HTTP without a socket."""
    app = server.streamable_http_app()
    async with server.session_manager.run():
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app))
        async with streamable_http_client("http://localhost:8000/mcp", http_client=http) as s:
            yield s


class Unplugged(httpx2.AsyncBaseTransport):
    """A transport to `app` that can be unplugged: then every request fails to connect, as to
    a server that died."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx2.ASGITransport(app)
        self.unplugged = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.unplugged:
            raise httpx2.ConnectError("All connection attempts failed", request=request)
        return await self.inner.handle_async_request(request)


def http_that_dies(tmp_path: Path) -> tuple[Any, Callable[[], None]]:
    """A streamable HTTP session to the server, and a function that kills the server."""
    del tmp_path  # nothing to keep
    app = server.streamable_http_app()
    transport = Unplugged(app)

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[Any]:
        async with server.session_manager.run():
            http = httpx2.AsyncClient(transport=transport)
            async with streamable_http_client("http://localhost:8000/mcp", http_client=http) as s:
                yield s

    return session(), lambda: setattr(transport, "unplugged", True)


def stdio_that_dies(tmp_path: Path) -> tuple[Any, Callable[[], None]]:
    """The server as a subprocess over stdio, and a function that kills it (SIGKILL)."""
    pid = tmp_path / "pid"
    run = f"echo $$ > {pid}; exec {sys.executable} -m tests.executors.mcp_server"
    stdio = StdioServerParameters(command="sh", args=["-c", run], cwd=str(ROOT))
    return stdio, lambda: os.kill(int(pid.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("transport", [http_that_dies, stdio_that_dies])
def test_leaving_after_the_server_died_closes_without_raising(
    transport: Callable[[Path], tuple[Any, Callable[[], None]]], tmp_path: Path
) -> None:
    given, kill = transport(tmp_path)
    with MCPTools(given) as tools:
        assert tools.run("get_weather", {"city": "北京"}) == EXPECTED[0]
        kill()
        assert tools.run("get_weather", {"city": "北京"}).is_error
    assert tools.run("get_weather", {"city": "北京"})[1]  # closed: an error result, still


def test_a_trio_run_over_streamable_http() -> None:
    with MCPTools(over_http()) as tools:
        run = trio.run(
            lambda: trio_executor.run(SPEC, PROMPT, model=ScriptedModel(replies()), tools=tools)
        )
    assert results(run.messages) == EXPECTED


def test_the_tools_of_several_servers_are_one_run_s() -> None:
    other = MCPServer("clock")

    @other.tool()
    def now() -> str:
        """现在几点"""
        return "12:00"

    with MCPTools(server, other) as tools:
        assert [s.name for s in tools.specs] == ["get_weather", "save_note", "now"]
        assert tools.run("now", {}) == ('{"result":"12:00"}', False)
        assert tools.run("get_weather", {"city": "上海"}) == ('{"温度":29,"天气":"多云"}', False)
        assert tools.run("nothing", {}) == (
            "no MCP server here offers a tool named 'nothing'",
            True,
        )
    with pytest.raises(ValueError, match="two MCP servers offer a tool named 'get_weather'"):
        MCPTools(server, server).__enter__()


def test_a_server_that_cannot_be_reached_says_so() -> None:
    gone = StdioServerParameters(command=sys.executable, args=["-c", "pass"])  # exits at once
    with pytest.raises(ConnectionError, match=r"MCP server .*: MCPError: Connection closed"):
        MCPTools(gone).__enter__()


def test_a_call_after_the_session_closed_is_an_error_result() -> None:
    with MCPTools(server) as tools:
        pass
    content, is_error = tools.run("get_weather", {"city": "北京"})
    assert is_error and "not connected" in str(content)


def test_a_recorded_run_replays_with_the_server_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.journal"
    with MCPTools(server) as tools:
        run = sync.run(SPEC, PROMPT, model=ScriptedModel(replies()), tools=tools, journal=path)
        specs = tools.specs
    events = Journal.read(path)
    assert type(events[0]) is Started and events[0].tools == specs
    # the server is gone, and the spec names no tools: the journal holds them
    replayed = Journal.replay(path, SPEC)
    assert replayed.dump() == run.loop.dump()
    assert Loop.load(SPEC, run.loop.dump()).state == run.loop.state
    # without the recorded list, the same events would not replay: the calls were unknown
    stripped = [msgspec.structs.replace(events[0], tools=()), *events[1:]]
    with pytest.raises(ProtocolError, match="ToolStarted"):
        Loop.replay(SPEC, stripped)
    # the command line shows and validates it with no --spec
    capsys.readouterr()
    assert cli.main(["show", str(path)]) == 0
    assert "get_weather" in capsys.readouterr().out
    assert cli.main(["validate", str(path)]) == 0


def test_a_resumed_run_goes_on_with_the_tools_it_recorded(tmp_path: Path) -> None:
    """A crash after the model asked for the calls: the journal resumes without the server,
    and the calls that cannot run now are answered as errors, never as unknown tools."""
    path = tmp_path / "run.journal"
    with MCPTools(server) as tools:
        with Journal(path) as journal:
            loop = Loop(SPEC)
            loop.start(PROMPT, 0.0, tools.specs)
            journal.append(loop.state.events[0])
    model = ScriptedModel(replies())
    run = sync.run(SPEC, model=model, journal=path)
    assert [t.name for t in model.requests[0].tools] == ["get_weather", "save_note"]
    assert all(is_error for _, is_error in results(run.messages))
    assert all("no implementation" in content for content, _ in results(run.messages))


def test_a_tool_name_the_providers_refuse_is_offered_as_one_they_take() -> None:
    """MCP allows names the formats refuse (they take 1-64 letters, digits, _ and -): such a
    tool is offered under a name they take, the same at every listing, and called by its own."""
    odd = MCPServer("files")

    @odd.tool(name="files.read")
    def read(path: str) -> str:
        """读一个文件"""
        return f"read {path}"

    @odd.tool(name="x" * 70)
    def long() -> str:
        """名字太长"""
        return "long"

    with MCPTools(odd) as tools:
        offered = [s.name for s in tools.specs]
        assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in offered), offered
        assert offered[0].startswith("files_read_")
        assert tools.run(offered[0], {"path": "/a"}) == ('{"result":"read /a"}', False)
        assert tools.run(offered[1], {}) == ('{"result":"long"}', False)
    with MCPTools(odd) as again:
        assert [s.name for s in again.specs] == offered


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
