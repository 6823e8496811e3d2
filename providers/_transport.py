"""Wire traces: record a provider's HTTP exchanges, and replay them to the real SDK clients.

A trace (format: fixtures/README.md) holds every request a conversation sent and the response it
got. `ReplayTransport` plugs into the SDK's `httpx2` client, serves the recorded responses in order
(event streams in small, oddly sized chunks) and checks each request against the recording;
`RecordingTransport` wraps a real transport and fills a trace, leaving credentials out. The SDK
clients a replay serves are built in `_offline`.

Each provider's SDK is an extra: a missing one is a `MissingExtra` that says what to install when
a client for that provider is made. (The Anthropic SDK, when installed, is imported with this
module: `ReplayMismatch` is one of its errors, so that the SDK lets it through unwrapped.)
"""

from __future__ import annotations

__all__ = [
    "KEPT_HEADERS",
    "AsyncRecordingTransport",
    "AsyncReplayTransport",
    "Exchange",
    "RecordedRequest",
    "RecordedResponse",
    "RecordingTransport",
    "ReplayMismatch",
    "ReplayTransport",
    "Trace",
    "TraceError",
]

import difflib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from turnstile.core import TurnstileError
from turnstile.core.decoding import decoded

from ._optional import installed, missing_extra

try:
    import httpx2
except ModuleNotFoundError as err:  # the transports below are httpx2's, as the SDKs are
    raise missing_extra(
        err, ("anthropic", "openai"), needed_by="recording and replaying traces"
    ) from None

if TYPE_CHECKING:
    from anthropic import AnthropicError as _LetThrough

FORMAT: Literal["turnstile-trace/1"] = "turnstile-trace/1"
Provider = Literal["anthropic", "openai-chat", "openai-responses"]

KEPT_HEADERS = frozenset(
    {
        "content-type",
        "request-id",
        "x-request-id",
        "x-should-retry",
        "retry-after",
        "retry-after-ms",
    }
)
"""The only response headers a recording keeps; everything else may identify an account."""

_CHUNK_SIZES = (1, 2, 3, 5, 7, 11, 13, 17)


class RecordedRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What was sent: method, URL path (no scheme, host or query) and the JSON body."""

    method: str
    path: str
    body: Any = None


class RecordedResponse(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True
):
    """What came back: status, kept headers, and either a JSON `body` or the raw `sse` text.

    A string `body` under a non-JSON content type is the raw text of the response.
    """

    status: int
    headers: dict[str, str] = {}
    body: Any = None
    sse: str | None = None

    def __post_init__(self) -> None:
        if self.body is not None and self.sse is not None:
            raise ValueError("a response has either `body` or `sse`, not both")


class Exchange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    request: RecordedRequest
    response: RecordedResponse


class Trace(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One conversation with one provider: every exchange, in order, plus how to replay it.

    Not frozen: a `RecordingTransport` appends to `exchanges` as the conversation goes.
    """

    format: Literal["turnstile-trace/1"] = FORMAT
    provider: Provider
    hand_written: bool
    description: str = ""
    covers: list[str] = []
    loop: dict[str, Any] | None = None
    exchanges: list[Exchange] = []

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace file.

        Raises:
            TraceError: the file is not valid JSON or not a trace of this format.
        """
        decode = msgspec.json.Decoder(cls).decode
        return decoded(decode, Path(path).read_bytes(), lambda why: TraceError(f"{path}: {why}"))

    def save(self, path: str | Path) -> None:
        """Write the trace as indented UTF-8 JSON (non-ASCII text stays readable)."""
        Path(path).write_bytes(msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n")


class TraceError(TurnstileError):
    """A file that is not a trace: bad JSON, a missing field, or an unknown format."""


if not TYPE_CHECKING:
    _anthropic = installed("anthropic")
    _LetThrough = _anthropic.AnthropicError if _anthropic is not None else Exception


class ReplayMismatch(TurnstileError, _LetThrough):
    """A request the trace did not record: a different body, method or path, or one too many.

    The message holds a unified diff of the recorded and sent JSON bodies. With the Anthropic
    SDK installed it is also an `AnthropicError`, only so that the SDK lets it through as it
    is: it wraps any other exception from a transport in `APIConnectionError`, which looks like
    a network fault.
    """

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        super().__init__(message)


def _canonical(body: Any) -> str:
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False)


def _json_or_text(content: bytes) -> Any:
    if not content:
        return None
    text = content.decode("utf-8", errors="replace")
    try:
        return decoded(json.loads, text, ValueError)
    except ValueError:  # not JSON, or nested deeper than a trace is read
        return text


def _is_json(content_type: str | None) -> bool:
    return content_type is None or "json" in content_type.lower()


def _is_sse(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


def _mismatch(index: int, trace: Trace, sent: RecordedRequest) -> ReplayMismatch:
    where = f"request {index + 1} ({sent.method} {sent.path})"
    if index >= len(trace.exchanges):
        title = f"{where} is one too many: the trace has {len(trace.exchanges)} exchange(s)"
        recorded_text = ""
    else:
        recorded = trace.exchanges[index].request
        title = f"{where} does not match the recorded {recorded.method} {recorded.path}"
        recorded_text = _canonical(recorded.body)
    diff = difflib.unified_diff(
        recorded_text.splitlines(),
        _canonical(sent.body).splitlines(),
        fromfile="recorded",
        tofile="sent",
        lineterm="",
    )
    return ReplayMismatch(index, "\n".join([title, *diff]))


def _split(raw: bytes) -> list[bytes]:
    sizes = itertools.cycle(_CHUNK_SIZES)
    chunks: list[bytes] = []
    start = 0
    while start < len(raw):
        end = start + next(sizes)
        chunks.append(raw[start:end])
        start = end
    return chunks


class _Chunks(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _serve(recorded: RecordedResponse) -> httpx2.Response:
    headers = httpx2.Headers(recorded.headers)
    if recorded.sse is not None:
        headers.setdefault("content-type", "text/event-stream; charset=utf-8")
        stream = _Chunks(_split(recorded.sse.encode("utf-8")))
        return httpx2.Response(recorded.status, headers=headers, stream=stream)
    if recorded.body is None:
        return httpx2.Response(recorded.status, headers=headers)
    if isinstance(recorded.body, str) and not _is_json(headers.get("content-type")):
        return httpx2.Response(recorded.status, headers=headers, content=recorded.body.encode())
    headers.setdefault("content-type", "application/json")
    content = json.dumps(recorded.body, ensure_ascii=False).encode("utf-8")
    return httpx2.Response(recorded.status, headers=headers, content=content)


class _Replay:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._served = 0

    @property
    def remaining(self) -> list[Exchange]:
        """The exchanges not served yet; empty once the conversation used the whole trace."""
        return self.trace.exchanges[self._served :]

    def _respond(self, request: httpx2.Request) -> httpx2.Response:
        sent = RecordedRequest(
            method=request.method, path=request.url.path, body=_json_or_text(request.content)
        )
        index = self._served
        if index >= len(self.trace.exchanges):
            raise _mismatch(index, self.trace, sent)
        exchange = self.trace.exchanges[index]
        recorded = exchange.request
        if (
            recorded.method.upper() != sent.method
            or recorded.path != sent.path
            or _canonical(recorded.body) != _canonical(sent.body)
        ):
            raise _mismatch(index, self.trace, sent)
        self._served += 1
        return _serve(exchange.response)


class ReplayTransport(_Replay, httpx2.BaseTransport):
    """Serves a trace to a sync `httpx2.Client`; raises `ReplayMismatch`, never goes online."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        return self._respond(request)


class AsyncReplayTransport(_Replay, httpx2.AsyncBaseTransport):
    """Serves a trace to an `httpx2.AsyncClient` (asyncio or trio); see `ReplayTransport`."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self._respond(request)


class _Recording:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def _add(self, request: httpx2.Request, response: httpx2.Response, **body: Any) -> int:
        kept = {k.lower(): v for k, v in response.headers.items() if k.lower() in KEPT_HEADERS}
        self.trace.exchanges.append(
            Exchange(
                request=RecordedRequest(
                    method=request.method,
                    path=request.url.path,
                    body=_json_or_text(request.content),
                ),
                response=RecordedResponse(status=response.status_code, headers=kept, **body),
            )
        )
        return len(self.trace.exchanges) - 1

    def _record_body(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Response:
        content = response.content
        if _is_json(response.headers.get("content-type")):
            body = _json_or_text(content)
        else:
            body = content.decode("utf-8", errors="replace") or None
        self._add(request, response, body=body)
        return httpx2.Response(
            response.status_code,
            headers=_decoded_headers(response),
            content=content,
            extensions=response.extensions,
        )

    def _stream_recorder(
        self, request: httpx2.Request, response: httpx2.Response
    ) -> Callable[[bytes], None]:
        slot = self._add(request, response, sse="")

        def finish(raw: bytes) -> None:
            exchange = self.trace.exchanges[slot]
            sse = raw.decode("utf-8", errors="replace")
            recorded = msgspec.structs.replace(exchange.response, sse=sse)
            self.trace.exchanges[slot] = msgspec.structs.replace(exchange, response=recorded)

        return finish


def _decoded_headers(response: httpx2.Response) -> list[tuple[str, str]]:
    dropped = {"content-encoding", "content-length", "transfer-encoding"}
    return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in dropped]


class _Tee(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """Passes a live stream's decoded bytes on while keeping a copy for the trace."""

    def __init__(self, inner: httpx2.Response, finish: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._finish = finish
        self._seen: list[bytes] = []
        self._done = False

    def _end(self) -> None:
        if not self._done:
            self._done = True
            self._finish(b"".join(self._seen))

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner.iter_bytes():
            self._seen.append(chunk)
            yield chunk
        self._end()

    def close(self) -> None:
        self._inner.close()
        self._end()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner.aiter_bytes():
            self._seen.append(chunk)
            yield chunk
        self._end()

    async def aclose(self) -> None:
        await self._inner.aclose()
        self._end()


def _teed(response: httpx2.Response, tee: _Tee) -> httpx2.Response:
    return httpx2.Response(
        response.status_code,
        headers=_decoded_headers(response),
        stream=tee,
        extensions=response.extensions,
    )


class RecordingTransport(_Recording, httpx2.BaseTransport):
    """Wraps a real sync transport and appends each exchange to `trace`.

    Request headers are never written, and of the response headers only `KEPT_HEADERS`. An event
    stream reaches the caller chunk by chunk as it arrives; its text is written to the trace when
    the stream ends or is closed.
    """

    def __init__(self, inner: httpx2.BaseTransport, trace: Trace) -> None:
        super().__init__(trace)
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        response = self._inner.handle_request(request)
        if _is_sse(response):
            return _teed(response, _Tee(response, self._stream_recorder(request, response)))
        response.read()
        return self._record_body(request, response)

    def close(self) -> None:
        self._inner.close()


class AsyncRecordingTransport(_Recording, httpx2.AsyncBaseTransport):
    """The async `RecordingTransport`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, trace: Trace) -> None:
        super().__init__(trace)
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        response = await self._inner.handle_async_request(request)
        if _is_sse(response):
            return _teed(response, _Tee(response, self._stream_recorder(request, response)))
        await response.aread()
        return self._record_body(request, response)

    async def aclose(self) -> None:
        await self._inner.aclose()
