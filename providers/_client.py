"""Model clients over the official SDKs: the codec's body goes out, the raw reply comes back to it.

The SDK does what it is good at (credentials, base URL, headers, timeouts) and nothing else; the
loop owns retries (its backoff, the provider's `retry-after`, quota failures final), so the SDK's
own are off unless asked for: each request goes through its low-level `post(path, body=..., cast_to=
httpx2.Response)`, which sends exactly the codec's JSON body and hands back the raw HTTP response,
unparsed. A JSON reply goes to the codec's `decode`; an event stream is cut into events by our
SSE parser and fed, payload by payload, to the codec's `StreamAccumulator`. Neither the SDKs nor
httpx2 are imported with this module: the codecs build on it and need neither, and whoever calls
`complete` already holds an SDK client, so httpx2 (which the SDKs are built on) is imported then.

Failures all end as `ProviderError` (a `ModelError`, so executors make `ModelFailed` of them):
an SDK exception through `map_sdk_error`; an error event, a failed response or a stream that ends
early as the codec reports it; and a reply the codec cannot read (`DecodeError`) as kind
`malformed_response`, not retryable: the API broke its documented shape, and asking again the
same way is not expected to fix that (a transient proxy page comes with a 5xx, which is retried).
"""

from __future__ import annotations

__all__ = ["StreamReader", "Wire", "WireClient", "read_body", "takes"]

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn

from turnstile.core import ModelRequest
from turnstile.core.messages import ModelResponse

from ._cache import WireCache
from ._deltas import Delta
from ._errors import DecodeError, ProviderError
from ._optional import required
from ._sse import SSEDecoder, SSEEvent
from ._wire import json_value

if TYPE_CHECKING:
    import httpx2

# How many times one call's dropped stream is picked up where it broke, when its format can (a
# Responses stream in background mode); each pick-up that fails is one more drop.
_RESUMES = 3


def takes(fn: Callable[..., object], keyword: str, *, named: bool = False) -> bool:
    """Whether `fn` accepts the keyword argument `keyword`: by name, or (unless `named`)
    through `**kwargs`. Optional extras of a protocol (`on_delta`, `context`, `history`) are
    passed only to implementations written for them; one without a signature to read gets
    none, as the protocol once was called."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or (not named and p.kind is p.VAR_KEYWORD) for p in parameters)


class Wire(NamedTuple):
    """One wire format: which SDK carries it, where it posts, its default model, and its codec."""

    sdk: str  # the SDK package whose clients can carry it: "anthropic" or "openai"
    path: str  # relative to the SDK client's base URL
    model: str
    encode: Callable[..., dict[str, Any]]
    decode: Callable[[Any], ModelResponse]
    accumulator: Callable[[], Any]


def _sdk_package(sdk: object) -> str | None:
    """The SDK package a client comes from (subclasses such as `AzureOpenAI` included)."""
    for cls in type(sdk).__mro__:
        package = cls.__module__.partition(".")[0]
        if package in ("anthropic", "openai"):
            return package
    return None


class WireClient:
    """A model client for one wire format over an official SDK client, sync or async.

    `sdk` is the SDK's client (`anthropic.Anthropic()`, `openai.AsyncOpenAI()`, ...): a sync one
    serves `complete(request)`, an async one `await acomplete(request)` (asyncio or trio).
    `model` defaults to the format's `Wire.model`; a request naming its own model (from
    `LoopSpec.models`) is sent to that one. With `stream=True` the reply is streamed and
    `on_delta` sees each `Delta` as it arrives (exceptions it raises end the call unchanged).
    `cache` keeps the wire form of the histories it sends, so each call encodes only the new
    messages (a new `WireCache()` when not given). `options` go to the codec's `encode`
    (temperature, tool_choice, thinking, ...).

    Each call is one request: the client works on `sdk.with_options(max_retries=0)`, since the
    loop decides what to retry and when (a quota failure never; others after its backoff and the
    provider's `retry-after`). `sdk_retries=True` keeps the SDK's own retries, under the loop's.

    Raises `TypeError` for an SDK client of the other provider, and `ValueError` for `on_delta`
    without `stream=True` (only a stream has deltas).
    """

    wire: ClassVar[Wire]

    def __init__(
        self,
        sdk: Any,
        *,
        model: str | None = None,
        stream: bool = False,
        on_delta: Callable[[Delta], object] | None = None,
        cache: WireCache | None = None,
        sdk_retries: bool = False,
        **options: Any,
    ) -> None:
        if _sdk_package(sdk) != self.wire.sdk:
            raise TypeError(f"{self._name} needs an {self.wire.sdk} SDK client, got {sdk!r}")
        if on_delta is not None and not stream:
            raise ValueError("on_delta needs stream=True: only a streamed reply has deltas")
        self.sdk = sdk if sdk_retries else sdk.with_options(max_retries=0)
        self.model = model or self.wire.model
        self.stream = stream
        self.on_delta = on_delta
        self.cache = WireCache() if cache is None else cache
        self.options = options
        self.is_async = inspect.iscoroutinefunction(sdk.post)

    @property
    def _name(self) -> str:
        return f"{type(self).__module__.rpartition('.')[2]}.{type(self).__name__}"

    def __repr__(self) -> str:
        kind = "an async" if self.is_async else "a sync"
        return f"<{self._name} {self.model!r} over {kind} {type(self.sdk).__name__}>"

    def complete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        """Send `request` and return the decoded reply; raises `ProviderError` on failure.
        `on_delta` sees this call's deltas too (an executor passes its caller's `on_update`)."""
        if self.is_async:
            raise TypeError(
                f"{self._name} wraps an async {type(self.sdk).__name__}: "
                "use `await client.acomplete(request)`, or give it a sync SDK client"
            )
        body = self._body(request)
        raw = self._raw_response()
        try:
            response = self.sdk.post(self.wire.path, cast_to=raw, body=body, stream=self.stream)
            try:
                if not _is_event_stream(response):
                    return self._received(request, read_body(self.wire, response.read()))
                reader = StreamReader(self.wire, self._deltas(on_delta))
                while True:
                    try:
                        for chunk in response.iter_bytes():
                            reader.feed(chunk)
                        return self._received(request, reader.result())
                    except Exception as exc:
                        path, options = reader.resume(exc, self.wire.path)
                    response.close()
                    response = self.sdk.get(path, cast_to=raw, options=options, stream=True)
            finally:
                response.close()
        except Exception as exc:
            _reraise(exc, request.model or self.model)

    async def acomplete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        """The async `complete`, for an async SDK client (under asyncio or trio)."""
        if not self.is_async:
            raise TypeError(
                f"{self._name} wraps a sync {type(self.sdk).__name__}: "
                "use `client.complete(request)`, or give it an async SDK client"
            )
        body = self._body(request)
        raw = self._raw_response()
        try:
            response = await self.sdk.post(
                self.wire.path, cast_to=raw, body=body, stream=self.stream
            )
            try:
                if not _is_event_stream(response):
                    return self._received(request, read_body(self.wire, await response.aread()))
                reader = StreamReader(self.wire, self._deltas(on_delta))
                while True:
                    try:
                        async for chunk in response.aiter_bytes():
                            reader.feed(chunk)
                        return self._received(request, reader.result())
                    except Exception as exc:
                        path, options = reader.resume(exc, self.wire.path)
                    await response.aclose()
                    response = await self.sdk.get(path, cast_to=raw, options=options, stream=True)
            finally:
                await response.aclose()
        except Exception as exc:
            _reraise(exc, request.model or self.model)

    def _deltas(self, extra: Callable[[Delta], object] | None) -> Callable[[Delta], object] | None:
        """Who sees a call's deltas: the client's `on_delta`, the call's, or both."""
        own = self.on_delta
        if extra is None or own is None:
            return own if extra is None else extra

        def both(delta: Delta) -> None:
            own(delta)
            extra(delta)

        return both

    def _raw_response(self) -> type[httpx2.Response]:
        """What the SDK's `post` is asked for: the HTTP response itself, unparsed."""
        httpx2: Any = required("httpx2", self.wire.sdk, needed_by=self._name)
        return httpx2.Response

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        stream = {"stream": True} if self.stream else {}
        model = request.model or self.model  # a spec's models (a fallback) before the client's
        return self.wire.encode(request, model=model, cache=self.cache, **stream, **self.options)

    def _received(self, request: ModelRequest, reply: ModelResponse) -> ModelResponse:
        """The reply to `request` as the run keeps it (a format may mark what it needs later)."""
        return reply


def read_body(wire: Wire, content: bytes) -> ModelResponse:
    """The reply in a JSON response body, by `wire`'s codec.

    Raises `DecodeError` for a body that is not JSON (or nests deeper than Python can follow),
    and what the codec's `decode` raises.
    """
    return wire.decode(json_value(content, ""))


def _is_event_stream(response: httpx2.Response) -> bool:
    """The reply is an event stream: a server that ignores `stream` may answer with JSON."""
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


class StreamReader:
    """Feeds an event stream's bytes, chunk by chunk, through the SSE parser into a new
    accumulator of `wire`'s codec; `on_delta` sees each delta. `feed` and `result` raise
    `DecodeError` for an event that is not a JSON object, and what the accumulator raises."""

    def __init__(self, wire: Wire, on_delta: Callable[[Delta], object] | None = None) -> None:
        self._events = SSEDecoder()
        self._accumulator = wire.accumulator()
        self._on_delta = on_delta
        self._seen = 0
        self._resumes = 0

    def feed(self, chunk: bytes) -> None:
        for event in self._events.feed(chunk):
            self._event(event)

    def result(self) -> ModelResponse:
        for event in self._events.close():
            self._event(event)
        return self._accumulator.result()

    def resume(self, error: Exception, path: str) -> tuple[str, dict[str, Any]]:
        """Where the rest of this stream is, after `error` cut it (the connection dropped, or it
        ended before its terminal event): the path under `path` and the request's options, when
        the accumulator can say (`resume_point()`: the reply's id and its last event's number)
        and the stream was not picked up `_RESUMES` times already; the events from there on are
        fed as this stream's. Else raises `error`: the call failed."""
        point = getattr(self._accumulator, "resume_point", None)
        if point is None or not _dropped(error) or self._resumes >= _RESUMES:
            raise error
        if (at := point()) is None:
            raise error
        self._resumes += 1
        self._events = SSEDecoder()  # the rest is a new event stream
        reply_id, after = at
        return f"{path}/{reply_id}", {"params": {"stream": "true", "starting_after": after}}

    def _event(self, event: SSEEvent) -> None:
        index, self._seen = self._seen, self._seen + 1
        if event.data in ("", "[DONE]"):  # Chat's streams end with `[DONE]`, which says nothing
            return
        payload = json_value(event.data, f"events[{index}].data")
        if not isinstance(payload, dict):
            raise DecodeError(f"events[{index}].data", "expected a JSON object")
        for delta in self._accumulator.feed(payload):
            if self._on_delta is not None:
                self._on_delta(delta)


def _dropped(error: Exception) -> bool:
    """`error` is a stream cut short: the connection failed, or the events ended too soon."""
    if isinstance(error, ProviderError):
        return error.kind == "incomplete_stream"
    import httpx2  # imported already: `complete` asked for it

    return isinstance(error, httpx2.TransportError)


def _reraise(exc: Exception, model: str | None) -> NoReturn:
    """Raise the `ProviderError` that `exc` stands for, naming the `model` asked, or `exc` itself
    when it is not the SDK's or the wire's (a `ReplayMismatch`, a bug, an exception from
    `on_delta`)."""
    if isinstance(exc, ProviderError):
        exc.model = exc.model or model
        raise exc
    if isinstance(exc, DecodeError):
        error = ProviderError(
            "malformed_response", f"the reply is not what the API documents: {exc}", retryable=False
        )
    else:
        from ._sdk import map_sdk_error  # imports both SDKs: only once something failed

        mapped = map_sdk_error(exc)
        if mapped is None:
            raise exc
        error = mapped
    error.model = model
    raise error from exc
