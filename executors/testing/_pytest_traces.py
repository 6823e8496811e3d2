"""One test's wire trace for the pytest plugin: find it, replay it or record it, and turn every
way that can go wrong into a test failure that says what to do.

Imported only once a test asks for a trace fixture: it loads the trace's SDK, which takes seconds.
A request the trace did not record fails the test right where it is sent: the transport raises
`TraceMismatchFailure`, a pytest outcome and so a `BaseException`, which neither the SDKs nor the
executors (they turn a failed model call into an ordinary `model_error` finish) catch.
"""

from __future__ import annotations

__all__ = ["Cassette", "LiveTransport", "Marker", "locate", "read_marker"]

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import httpx2
import msgspec
import pytest
from turnstile.core import ModelRequest
from turnstile.core.messages import ToolResults, UserMessage
from turnstile.providers.client import WireClient
from turnstile.providers.extras import required
from turnstile.providers.replay import (
    CLIENTS,
    AsyncRecordingTransport,
    RecordingTransport,
    ReplayMismatch,
    ReplayTransport,
    Trace,
    TraceError,
    load_trace,
    offline_sdk,
)

from ._mismatch import TraceMismatchFailure

_KEYS = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"), "openai": ("OPENAI_API_KEY",)}


class Marker(NamedTuple):
    """The arguments of `turnstile_trace(path, *, provider, model, stream, **options)`."""

    path: str
    provider: str | None
    model: str | None
    stream: bool | None
    options: dict[str, Any]


def _marker(
    path: str | os.PathLike[str],
    *,
    provider: str | None = None,
    model: str | None = None,
    stream: bool | None = None,
    **options: Any,
) -> Marker:
    return Marker(os.fspath(path), provider, model, stream, options)


def read_marker(mark: pytest.Mark) -> Marker:
    """The marker's arguments, or a test failure naming what is wrong with them."""
    try:
        marker = _marker(*mark.args, **mark.kwargs)
    except TypeError as err:
        pytest.fail(
            f"turnstile_trace(path, *, provider=None, model=None, ...): {err}", pytrace=False
        )
    if marker.provider is not None and marker.provider not in CLIENTS:
        known = ", ".join(CLIENTS)
        pytest.fail(
            f"turnstile_trace: unknown provider {marker.provider!r} (one of {known})", pytrace=False
        )
    return marker


def locate(path: str, test_dir: Path, rootdir: Path) -> Path:
    """`path` in the test file's folder, else under the rootdir; where neither has it, the
    test file's folder (where a recording goes)."""
    given = Path(path)
    if given.is_absolute():
        return given
    candidates = [test_dir / given, rootdir / given]
    return next((c for c in candidates if c.exists()), candidates[0])


def _provider_from_name(path: Path) -> str | None:
    return next((p for p in path.name.split(".")[1:] if p in CLIENTS), None)


def _first_body(trace: Trace | None) -> dict[str, Any]:
    if trace is None or not trace.exchanges:
        return {}
    body = trace.exchanges[0].request.body
    return body if isinstance(body, dict) else {}


class LiveTransport(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """The real network for sync and async clients, each transport made on first use."""

    def __init__(self) -> None:
        self._sync: httpx2.HTTPTransport | None = None
        self._async: httpx2.AsyncHTTPTransport | None = None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._sync is None:
            self._sync = httpx2.HTTPTransport()
        return self._sync.handle_request(request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._async is None:
            self._async = httpx2.AsyncHTTPTransport()
        return await self._async.handle_async_request(request)

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()


class _Replaying(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """Serves the trace to sync and async clients alike, in one order; a request it did not
    record fails the test on the spot (and is kept, in case the test swallowed that)."""

    def __init__(self, cassette: Cassette) -> None:
        self._cassette = cassette
        self.tape = ReplayTransport(cassette.trace)
        self.mismatch: ReplayMismatch | None = None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return self.tape.handle_request(request)
        except ReplayMismatch as err:
            self.mismatch = self.mismatch or err
            message = self._cassette.mismatch_message(err)
            raise TraceMismatchFailure(message, pytrace=False) from None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self.handle_request(request)


class _LoopNotes:
    """What a recording learns of the loop from the requests it sends, written as the trace's
    `loop` section so that `turnstile replay` can run the trace too: the first request's prompt,
    system, tools and max_tokens, and every tool result later requests carry. The test's guards
    are not visible here; the section leaves them at their defaults."""

    def __init__(self, model: str, stream: bool, options: dict[str, Any]) -> None:
        self._head = {"model": model, "stream": stream, "options": options}
        self._first: ModelRequest | None = None
        self._outputs: dict[str, dict[str, Any]] = {}

    def see(self, request: ModelRequest) -> None:
        if self._first is None:
            self._first = request
        for message in request.messages:
            if type(message) is ToolResults:
                for r in message.results:
                    self._outputs[r.call_id] = {"content": r.content, "is_error": r.is_error}

    def section(self) -> dict[str, Any] | None:
        """The `loop` section, or None when the run did not start from one user prompt (the
        section's `prompt` can say nothing else)."""
        first = self._first
        if first is None or len(first.messages) != 1 or type(first.messages[0]) is not UserMessage:
            return None
        return {
            **self._head,
            "prompt": first.messages[0].content,
            "system": first.system,
            "max_tokens": first.max_tokens,
            "tools": msgspec.to_builtins(list(first.tools)),
            "tool_outputs": self._outputs,
        }


class Cassette:
    """One test's trace: replayed (mode `none`, or `new` when the file exists) or recorded.

    Provider: the marker's, else the trace's, else the file name's (`x.anthropic.json`). Model
    and stream: the marker's, else the first recorded request's, else the client's defaults.
    """

    def __init__(self, marker: Marker, path: Path, mode: str, nodeid: str, shown: str) -> None:
        self.path = path
        self.nodeid = nodeid
        self._shown = shown
        self.recording = mode == "all" or (mode == "new" and not path.exists())
        old = self._load(tolerant=self.recording) if path.exists() else None
        if old is None and not self.recording:
            pytest.fail(self._missing_message(marker), pytrace=False)
        self.provider = self._provider(marker, old)
        first = _first_body(old)
        self.model = marker.model if marker.model is not None else first.get("model")
        self.stream = bool(marker.stream if marker.stream is not None else first.get("stream"))
        self.options = marker.options
        self.used = False
        self._notes: _LoopNotes | None = None
        self._closers: list[Callable[[], object]] = []
        self._replaying: _Replaying | None = None
        if old is not None and not self.recording:
            self.trace = old
            self._replaying = _Replaying(self)
        else:
            self.trace = Trace(
                provider=self.provider,  # type: ignore[arg-type]
                hand_written=False,
                description=f"Recorded from the live API by the test {nodeid}.",
            )

    def _load(self, *, tolerant: bool) -> Trace | None:
        try:
            return load_trace(self.path)
        except (OSError, TraceError) as err:
            if tolerant:
                return None
            pytest.fail(f"turnstile: cannot read the trace {self._shown}: {err}", pytrace=False)

    def _provider(self, marker: Marker, old: Trace | None) -> str:
        if marker.provider is not None:
            if old is not None and old.provider != marker.provider and not self.recording:
                pytest.fail(
                    f"turnstile: the marker says provider={marker.provider!r} but the trace "
                    f"{self._shown} was recorded from {old.provider!r}",
                    pytrace=False,
                )
            return marker.provider
        if old is not None:
            return old.provider
        found = _provider_from_name(self.path)
        if found is None:
            pytest.fail(
                f"turnstile: cannot tell the provider of {self._shown}: name it "
                f"`<name>.<provider>.json` or pass provider= to the marker "
                f"(one of {', '.join(CLIENTS)})",
                pytrace=False,
            )
        return found

    @property
    def _sdk(self) -> str:
        return CLIENTS[self.provider].wire.sdk

    def _missing_message(self, marker: Marker) -> str:
        provider = marker.provider or _provider_from_name(self.path)
        command = f"pytest --turnstile-record=new {self.nodeid}"
        where = "(a relative path is looked up next to the test file, then under the rootdir)"
        if provider is None:
            return (
                f"turnstile: no trace at {self._shown}. Record it from the live API with\n"
                f"    {command}\n"
                f"and the provider's API key in the environment, once the file is named "
                f"`<name>.<provider>.json` or the marker says provider=... {where}"
            )
        keys = " or ".join(_KEYS[CLIENTS[provider].wire.sdk])
        return (
            f"turnstile: no trace at {self._shown}. Record it from the live API with\n"
            f"    {keys}=... {command}\n{where}"
        )

    def mismatch_message(self, err: ReplayMismatch) -> str:
        return (
            f"turnstile: the request does not match the trace {self._shown}\n{err}\n"
            f"If the change is intended, record the trace again: "
            f"pytest --turnstile-record=all {self.nodeid}"
        )

    def client(self, *, sync: bool, network: Callable[[], Any]) -> WireClient:
        """The provider's `Client` over its SDK (sync or async), wired to the replay, or to a
        recording around `network()` (the live transport, asked for only when recording)."""
        self.used = True
        if self._replaying is not None:
            sdk = self._replay_sdk(sync)
        else:
            sdk = self._live_sdk(sync, network())
        client = CLIENTS[self.provider](sdk, model=self.model, stream=self.stream, **self.options)
        if self._replaying is None:
            self._notes = notes = _LoopNotes(client.model, self.stream, self.options)
            encode = client._body

            def noting(request: ModelRequest) -> Any:
                notes.see(request)
                return encode(request)

            client._body = noting  # type: ignore[method-assign]
        return client

    def _replay_sdk(self, sync: bool) -> Any:
        if sync:
            http: Any = httpx2.Client(transport=self._replaying, trust_env=False)
            self._closers.append(http.close)
        else:
            http = httpx2.AsyncClient(transport=self._replaying, trust_env=False)
        return offline_sdk(self._sdk, http)

    def _live_sdk(self, sync: bool, network: Any) -> Any:
        """The SDK as the user would make it (key and base URL from the environment), but without
        its own retries, so the trace holds exactly what the loop saw and replays the same."""
        names = _KEYS[self._sdk]
        if not any(os.environ.get(name) for name in names):
            pytest.fail(
                f"turnstile: recording {self._shown} needs an API key: set "
                f"{' or '.join(names)} in the environment",
                pytrace=False,
            )
        module: Any = required(self._sdk, self._sdk, needed_by=f"recording {self._shown}")
        if sync:
            http = module.DefaultHttpxClient(transport=RecordingTransport(network, self.trace))
            self._closers.append(http.close)
            cls = module.Anthropic if self._sdk == "anthropic" else module.OpenAI
        else:
            http = module.DefaultAsyncHttpxClient(
                transport=AsyncRecordingTransport(network, self.trace)
            )
            cls = module.AsyncAnthropic if self._sdk == "anthropic" else module.AsyncOpenAI
        return cls(http_client=http, max_retries=0)

    def close(self, *, passed: bool) -> str | None:
        """End the test: save a recording (returning what was written), or, after a passing
        test that used a client, fail if the replay saw a mismatch or left exchanges unused."""
        for close in self._closers:
            close()
        if self._replaying is None:
            if not self.trace.exchanges:
                return None
            if self._notes is not None:
                self.trace.loop = self._notes.section()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.trace.save(self.path)
            return f"recorded {len(self.trace.exchanges)} exchange(s) to {self._shown}"
        if not (passed and self.used):
            return None
        if self._replaying.mismatch is not None:
            pytest.fail(self.mismatch_message(self._replaying.mismatch), pytrace=False)
        left = self._replaying.tape.remaining
        if left:
            total = len(self.trace.exchanges)
            pytest.fail(
                f"turnstile: {len(left)} of {total} recorded exchange(s) in {self._shown} were "
                f"left unused: the test sent {total - len(left)} request(s); the next recorded "
                f"one is {left[0].request.method} {left[0].request.path}",
                pytrace=False,
            )
        return None
