"""Faults at the wire, under the real SDK: a replayed trace's HTTP transport that, when armed,
answers with a 429 and its `retry-after`, a 5xx, a quota error, a connection reset, a stream
cut mid-event, malformed JSON or a timeout, so the provider's client meets them as it would
meet them live and turns each into the failure the loop sees."""

from __future__ import annotations

__all__ = ["FaultyTransport", "traced_client"]

import json
from collections.abc import Iterator
from typing import Any

import httpx2

from ._faults import Draws, FaultKind


class _Cut(httpx2.SyncByteStream):
    """A body whose connection drops after its first bytes."""

    def __init__(self, first: bytes) -> None:
        self.first = first

    def __iter__(self) -> Iterator[bytes]:
        yield self.first
        raise httpx2.RemoteProtocolError("peer closed connection without a complete body")


def _error(provider: str, kind: str, message: str, code: str | None = None) -> bytes:
    """An error body as the provider's API sends it."""
    if provider == "anthropic":
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


def _response(
    provider: str, kind: FaultKind, r: Draws, stream: bool, request: httpx2.Request
) -> httpx2.Response:
    json_type = {"content-type": "application/json"}
    match kind:
        case FaultKind.wire_429:
            headers = {**json_type, "retry-after": str(r.randint(1, 30))}
            body = _error(provider, "rate_limit_error", "Rate limit reached (simulated)")
            return httpx2.Response(429, headers=headers, content=body)
        case FaultKind.wire_5xx:
            status = [500, 503, 529][r.randint(0, 2)]
            kind_name = "overloaded_error" if status == 529 else "api_error"
            body = _error(provider, kind_name, f"HTTP {status} (simulated)", "server_error")
            return httpx2.Response(status, headers=json_type, content=body)
        case FaultKind.wire_quota:
            body = _error(
                provider, "insufficient_quota", "You exceeded your quota.", "insufficient_quota"
            )
            return httpx2.Response(429, headers=json_type, content=body)
        case FaultKind.wire_reset:
            return httpx2.Response(200, headers=json_type, stream=_Cut(b'{"id": "'))
        case FaultKind.wire_cut:
            if not stream:
                return httpx2.Response(200, headers=json_type, stream=_Cut(b'{"id": "'))
            sse = {"content-type": "text/event-stream"}
            return httpx2.Response(200, headers=sse, stream=_Cut(b'event: message\ndata: {"ty'))
        case FaultKind.wire_malformed:
            if stream:
                sse = {"content-type": "text/event-stream"}
                return httpx2.Response(200, headers=sse, content=b"data: {x\n\n")
            return httpx2.Response(200, headers=json_type, content=b"{not json")
    raise httpx2.ReadTimeout("timed out (simulated)", request=request)


class FaultyTransport(httpx2.BaseTransport):
    """A trace's replay transport that, when `armed` with a wire fault, answers with it instead
    (the recorded exchange stays for the next request)."""

    def __init__(self, inner: httpx2.BaseTransport, provider: str, stream: bool) -> None:
        self.inner = inner
        self.provider = provider
        self.stream = stream
        self.armed: tuple[FaultKind, Draws] | None = None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.armed is None:
            return self.inner.handle_request(request)
        (kind, r), self.armed = self.armed, None
        request.read()
        return _response(self.provider, kind, r, self.stream, request)

    def close(self) -> None:
        self.inner.close()


def traced_client(trace: Any) -> tuple[Any, FaultyTransport]:
    """The provider's `Client` for a trace, over its official SDK, over the trace's replay
    behind a `FaultyTransport`."""
    from turnstile.providers.replay import CLIENTS, ReplayTransport, offline_sdk

    loop = trace.loop or {}
    stream = bool(loop.get("stream", False))
    transport = FaultyTransport(ReplayTransport(trace), trace.provider, stream)
    http = httpx2.Client(transport=transport, trust_env=False)
    client = CLIENTS[trace.provider](
        offline_sdk(trace.provider, http),
        model=loop.get("model"),
        stream=stream,
        **loop.get("options", {}),
    )
    return client, transport
