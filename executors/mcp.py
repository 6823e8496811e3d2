"""The tools of MCP servers as a run's tools: `MCPTools` is a `ToolRunner` for any executor.

The official `mcp` client is async (anyio); `MCPTools` keeps its session in an event loop of
its own, in a thread, so the sync executor calls it as a plain function and the trio executor
from its worker threads, alike. The servers' tool lists are read once, when it opens: a run given
it records it (its `Started` event holds the tools), so a replay decides the same with the
server gone.
"""

from __future__ import annotations

__all__ = ["MCPTools", "offered_name", "outcome", "tool_spec"]

import base64
import contextlib
import hashlib
import logging
import re
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec
from turnstile.core import ToolOutcome, ToolSpec
from turnstile.core.messages import Document, Image, ResultPart, Text

try:
    import anyio
    import mcp
    import mcp.types
    from anyio.from_thread import BlockingPortal, start_blocking_portal
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "mcp", needed_by="turnstile.executors.mcp") from None

if TYPE_CHECKING:
    from mcp.client.client import Client

_log = logging.getLogger("turnstile.mcp")
_json = msgspec.json.Encoder()


_TAKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The tool names all three formats take (MCP allows more: dots, spaces, any length)."""


def offered_name(name: str) -> str:
    """`name`, or, if the providers would refuse it, a name they take: the rest turned to `_`,
    cut short, and a hash of the original after it, so that it is the same at every listing
    and no two originals share it."""
    if _TAKEN.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', name)[:55]}_{digest}"


def tool_spec(tool: mcp.types.Tool) -> ToolSpec:
    """An MCP tool as the model sees it, under a name the providers take (`offered_name`).
    One the server marks read-only or idempotent is `replay_safe`: a call a crash interrupted
    may run again."""
    hints = tool.annotations
    return ToolSpec(
        offered_name(tool.name),
        tool.description or tool.title or "",
        dict(tool.input_schema),
        replay_safe=hints is not None and bool(hints.read_only_hint or hints.idempotent_hint),
    )


def _part(block: mcp.types.ContentBlock) -> ResultPart:
    match block:
        case mcp.types.TextContent(text=text):
            return Text(text)
        case mcp.types.ImageContent(data=data, mime_type=media_type):
            return Image(media_type=media_type, data=base64.b64decode(data))
        case mcp.types.EmbeddedResource(resource=mcp.types.TextResourceContents(text=text)):
            return Text(text)
        case mcp.types.EmbeddedResource(resource=mcp.types.BlobResourceContents() as blob):
            return Document(media_type=blob.mime_type, data=base64.b64decode(blob.blob))
    # audio and resource links, which a tool result cannot carry as parts: described as JSON
    return Text(block.model_dump_json(exclude_none=True, by_alias=True))


def outcome(result: mcp.types.CallToolResult) -> ToolOutcome:
    """A tool's result as the model reads it: its structured content (as JSON) when it has
    some, else its text; images and documents as parts. `is_error` stays an error result."""
    parts = [_part(block) for block in result.content]
    if result.structured_content is not None:  # the text blocks only repeat it, by the spec
        structured = Text(_json.encode(result.structured_content).decode())
        parts = [structured, *(p for p in parts if type(p) is not Text)]
    content: str | list[ResultPart]
    if all(type(p) is Text for p in parts):
        content = "\n".join(p.text for p in parts if type(p) is Text)
    else:
        content = parts
    return ToolOutcome(content, bool(result.is_error))


class MCPTools:
    """The tools of MCP servers, for an executor's `tools=`.

    Each server is what `mcp.Client` connects to: an in-process server (`MCPServer`), a URL
    (streamable HTTP), `mcp.StdioServerParameters` (a subprocess spoken to over stdio), or a
    transport. `with MCPTools(server, ...) as tools:` connects and lists their tools (`specs`;
    two servers offering one name is a `ValueError`); leaving closes the sessions (and ends a
    stdio server), and never raises for a server already gone; a server that cannot be
    reached is a `ConnectionError` (or the `OSError` of a command that cannot start). A call the
    server fails, or that cannot reach it, comes back as an error result the model reads, never
    as an exception. `client_options` go to each `mcp.Client` (`read_timeout_seconds`...).
    """

    def __init__(self, *servers: Any, **client_options: Any) -> None:
        if not servers:
            raise TypeError("MCPTools needs at least one server")
        self._servers = servers
        self._options = client_options
        self._portal: BlockingPortal | None = None
        self._clients: dict[str, Client] = {}  # by the name of each tool it serves, as offered
        self._names: dict[str, str] = {}  # each tool's own name, by the name it is offered as
        self._exit = contextlib.ExitStack()
        self.specs: tuple[ToolSpec, ...] = ()

    def __repr__(self) -> str:
        servers = ", ".join(map(repr, self._servers))
        return f"MCPTools({servers}, tools={[s.name for s in self.specs]})"

    def __enter__(self) -> MCPTools:
        clients: dict[str, Client] = {}
        names: dict[str, str] = {}
        specs: list[ToolSpec] = []
        clash: str | None = None
        failed: ConnectionError | None = None  # raised once the sessions are closed: closing
        with contextlib.ExitStack() as opening:  # one with an error wraps it in the SDK's group
            portal = opening.enter_context(start_blocking_portal())
            for server in self._servers:
                session = _Session(portal, mcp.Client(server, **self._options), server)
                try:
                    client = opening.enter_context(session)
                except ExceptionGroup as group:  # the SDK's task groups: say what went wrong
                    raise ConnectionError(f"MCP server {server!r}: {_first(group)}") from group
                try:
                    listing = portal.call(_listed, client)
                except Exception as e:  # an error answered, a list paging in a loop
                    failed = ConnectionError(f"MCP server {server!r}: {_first(e)}")
                    break
                for listed in listing:
                    spec = tool_spec(listed)
                    clash = clash or (listed.name if spec.name in clients else None)
                    clients[spec.name], names[spec.name] = client, listed.name
                    specs.append(spec)
            if clash is None and failed is None:  # else closed again
                self._portal, self._clients, self.specs = portal, clients, tuple(specs)
                self._names = names
                self._exit = opening.pop_all()
        if failed is not None:
            raise failed
        if clash is not None:
            raise ValueError(f"two MCP servers offer a tool named {clash!r}")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._portal, self._clients, self._names = None, {}, {}
        self._exit.close()

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Call the tool `name` on its server; from any thread but the sessions' own."""
        portal, client = self._portal, self._clients.get(name)
        if portal is None:
            return ToolOutcome(f"{name}: the MCP server is not connected (open MCPTools)", True)
        if client is None:
            return ToolOutcome(f"no MCP server here offers a tool named {name!r}", True)
        try:  # a server's malformed content (an image not in base64) is the call's failure too
            return outcome(portal.call(client.call_tool, self._names[name], arguments))
        except Exception as e:
            _log.warning("MCP tool %s failed: %s", name, type(e).__name__, exc_info=e)
            detail = str(e)
            return ToolOutcome(
                f"{name} failed: {type(e).__name__}" + (f": {detail}" if detail else ""), True
            )


class _Session:
    """A client's session, held open by a task of the portal's loop. Closing never raises: a
    server already gone (a stdio process that exited, an HTTP server that died) fails the
    goodbye, with nothing left to close but what the client closes anyway; that is logged.

    (anyio's `wrap_async_context_manager` exits the client without the cancellation its own
    task group sent when the transport failed, so the client cannot absorb it: the close
    raises. Here the client's `async with` sees what ends it.)"""

    def __init__(self, portal: BlockingPortal, client: Client, server: Any) -> None:
        self._portal, self._client, self._server = portal, client, server
        self._opened: Future[tuple[Client, anyio.Event]] = Future()

    def __enter__(self) -> Client:
        self._held = self._portal.start_task_soon(self._hold)
        client, self._closing = self._opened.result()
        return client

    def __exit__(self, *exc_info: object) -> None:
        self._portal.call(self._closing.set)
        self._held.result()

    async def _hold(self) -> None:
        closing, opened = anyio.Event(), False
        try:
            async with self._client as client:
                opened = True
                self._opened.set_result((client, closing))
                await closing.wait()
        except BaseException as e:
            if not opened:
                self._opened.set_exception(e)
                raise
            if not isinstance(e, Exception):
                raise
            server = self._server
            _log.warning("MCP server %r: closing failed: %s", server, _first(e), exc_info=e)


def _first(group: BaseException) -> str:
    """The first error a task group gathered (or the error itself), named."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


async def _listed(client: Client) -> list[mcp.types.Tool]:
    """Every tool the server lists, page after page; a cursor that comes back is a server
    paging in a loop, which would never end."""
    tools: list[mcp.types.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise ConnectionError(f"its tool list pages in a loop (cursor {cursor!r} came back)")
        seen.add(cursor)
