"""OpenTelemetry spans of a run, per the GenAI semantic conventions: `invoke_agent {name}` for
the run, under it `chat {model}` for each model call and `execute_tool {tool}` for each call
a tool ran.

Every span is made from the run's events, once its ending event is recorded, with the times the
events carry: live, as the executor's `on_event` (`with tracing.run() as on_event:`), or
afterwards from a recorded run (`tracing.record(run)`, a state, events, a journal's path),
which gives the same spans. A model call's span runs from the step that asked for it (a retry's
wait included) to its reply; a tool's from its `ToolStarted` to its result. What the model or a
tool said is recorded only with `capture_content=True`.
"""

from __future__ import annotations

__all__ = ["Tracing"]

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
from turnstile.core import (
    Event,
    LoopSpec,
    LoopState,
    ModelFailed,
    ModelReplied,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from turnstile.core.messages import (
    AssistantMessage,
    Instructions,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
)

try:
    from opentelemetry import trace
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "otel", needed_by="turnstile.executors.otel") from None

from ._journal import Journal
from ._run import Run

_json = msgspec.json.Encoder()


def _usage(usage: Usage) -> dict[str, int]:
    """Token counts: input (the whole prompt, cached parts included) and output always, the
    cache's reads and writes and the reasoning tokens when there are some."""
    counts = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    for key, value in (
        ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
        ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
        ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens),
    ):
        if value:
            counts[key] = value
    return counts


def _part(part: Any) -> dict[str, Any]:
    """A part as the conventions' message schema writes it."""
    match part:
        case Text(text=text):
            return {"type": "text", "content": text}
        case Thinking(text=text):
            return {"type": "reasoning", "content": text}
        case ToolCall(id=call_id, name=name, arguments=arguments):
            return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
    return {"type": type(part).__name__.lower()}


def _messages(messages: Sequence[Message]) -> str:
    """Messages as the conventions' JSON writes them (`gen_ai.input.messages`...)."""
    shown: list[dict[str, Any]] = []
    for m in messages:
        match m:
            case ToolResults(results=results):
                parts = [
                    {"type": "tool_call_response", "id": r.call_id, "response": r.content}
                    for r in results
                ]
                shown.append({"role": "tool", "parts": parts})
            case Instructions(text=text):
                shown.append({"role": m.role, "parts": [{"type": "text", "content": text}]})
            case AssistantMessage(content=content) | UserMessage(content=content):
                listed = [Text(content)] if isinstance(content, str) else content
                shown.append(
                    {
                        "role": "assistant" if type(m) is AssistantMessage else "user",
                        "parts": [_part(p) for p in listed],
                    }
                )
    return _json.encode(shown).decode()


def _server(client: object) -> dict[str, Any]:
    """`server.address` and `server.port` of the URL a model client's SDK client sends to."""
    url = getattr(getattr(client, "sdk", None), "base_url", None)
    host = getattr(url, "host", None)
    if not isinstance(host, str) or not host:
        return {}
    port = getattr(url, "port", None)
    if not isinstance(port, int):
        port = 80 if getattr(url, "scheme", "https") == "http" else 443
    return {"server.address": host, "server.port": port}


class _Spans:
    """One run's spans, made as its events arrive."""

    def __init__(self, tracing: Tracing, epoch_ns: int | None, system: str | None) -> None:
        self._t = tracing
        self._epoch = epoch_ns
        self._system: dict[str, str] = {}
        if tracing.capture_content and system:
            instructions = [{"type": "text", "content": system}]
            self._system["gen_ai.system_instructions"] = _json.encode(instructions).decode()
        self._failed: ModelFailed | None = None  # the last model call, if it failed
        self._root: trace.Span | None = None
        self._context: Any = None
        self._usage = Usage()
        self._last = 0.0  # the time of the last event but a tick: when a model call is asked
        self._calls: dict[str, tuple[ToolCall, float]] = {}  # by id: the call, when it started

    def _ns(self, now: float) -> int:
        if self._epoch is None:
            self._epoch = time.time_ns() - round(now * 1e9)
        return self._epoch + round(now * 1e9)

    def _open(self, now: float, messages: list[Message] | None) -> None:
        """The run's span, from a `Started` event (or the first event of a resumed run)."""
        t = self._t
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": t.agent,
            **t.model_attributes,
            **self._system,
        }
        if t.capture_content and messages is not None:
            attributes["gen_ai.input.messages"] = _messages(messages)
        self._root = t.tracer.start_span(
            f"invoke_agent {t.agent}", start_time=self._ns(now), attributes=attributes
        )
        self._context = trace.set_span_in_context(self._root)
        self._usage = Usage()
        self._failed = None

    def on_event(self, event: Event) -> None:
        t = self._t
        if type(event) is Started:
            self.close()
            self._open(event.now, event.messages)
        elif self._root is None:  # a resumed run: its calls from before are not known here
            self._open(event.now, None)
        match event:
            case ModelReplied(response=response):
                self._failed = None
                self._usage = self._usage + response.usage
                attributes: dict[str, Any] = {**_usage(response.usage)}
                attributes["gen_ai.response.finish_reasons"] = [response.stop.value]
                if response.id is not None:
                    attributes["gen_ai.response.id"] = response.id
                if response.model is not None:
                    attributes["gen_ai.response.model"] = response.model
                if t.capture_content:
                    reply = AssistantMessage(response.content)
                    attributes["gen_ai.output.messages"] = _messages([reply])
                self._chat(event, attributes).end(self._ns(event.now))
                for part in response.content:
                    if type(part) is ToolCall:
                        self._calls[part.id] = (part, event.now)
            case ModelFailed(kind=kind, message=message):
                self._failed = event
                span = self._chat(event, {"error.type": kind or "model_error"})
                span.set_status(trace.StatusCode.ERROR, message)
                span.end(self._ns(event.now))
            case ToolStarted(call_id=call_id) if call_id in self._calls:
                self._calls[call_id] = (self._calls[call_id][0], event.now)
            case ToolReturned(call_id=call_id) if call_id in self._calls:
                self._tool(event, *self._calls.pop(call_id))
        if type(event) is not Tick:
            self._last = event.now

    def _chat(self, event: ModelReplied | ModelFailed, attributes: dict[str, Any]) -> trace.Span:
        """A model call's span, from the step that asked for it; its attributes all at once
        (the SDK takes a lock per attribute set later)."""
        t = self._t
        asked = t.model_attributes
        if event.model is not None:  # the spec's models: this call's, fallbacks included
            asked = {**asked, "gen_ai.request.model": event.model}
        model = asked.get("gen_ai.request.model")
        return t.tracer.start_span(
            f"chat {model}" if model else "chat",
            self._context,
            start_time=self._ns(self._last),
            attributes={"gen_ai.operation.name": "chat", **asked, **self._system, **attributes},
        )

    def _tool(self, event: ToolReturned, call: ToolCall, started: float) -> None:
        t = self._t
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if t.capture_content:
            result = event.content
            attributes["gen_ai.tool.call.arguments"] = _json.encode(call.arguments).decode()
            attributes["gen_ai.tool.call.result"] = (
                result if isinstance(result, str) else _json.encode(result).decode()
            )
        if event.is_error:
            attributes["error.type"] = "tool_error"
        span = t.tracer.start_span(
            f"execute_tool {call.name}",
            self._context,
            start_time=self._ns(started),
            attributes=attributes,
        )
        if event.is_error:
            span.set_status(trace.StatusCode.ERROR)
        span.end(self._ns(event.now))

    def failed(self, error: BaseException) -> None:
        self._failed = None  # the exception is what ended the run
        if self._root is not None:
            self._root.set_attribute("error.type", type(error).__qualname__)
            self._root.set_status(trace.StatusCode.ERROR, str(error))

    def close(self) -> None:
        """End the run's span at its last event. A run whose last model call failed ended on
        it (`model_error`), or was cut short while waiting to retry it: an error either way."""
        root, self._root = self._root, None
        if root is not None:
            root.set_attributes(_usage(self._usage))
            failed = self._failed
            if failed is not None and root.is_recording():
                root.set_attribute("error.type", failed.kind or "model_error")
                root.set_status(trace.StatusCode.ERROR, failed.message)
            root.end(self._ns(self._last))
        self._calls = {}


class Tracing:
    """Spans of runs for an OpenTelemetry tracer (the global provider's, or `tracer_provider`'s).

    `agent` names the run's span; `model` and `provider` (`"openai"`, `"anthropic"`...) become
    `gen_ai.request.model` and `gen_ai.provider.name`; `client`, the run's model client, gives
    `server.address` and `server.port` (from its SDK client's `base_url`) and the model when
    `model` is not given. `capture_content=True` adds the messages, the tools' arguments and
    results (off by default: they may hold anything).
    """

    def __init__(
        self,
        agent: str = "turnstile",
        *,
        model: str | None = None,
        provider: str | None = None,
        capture_content: bool = False,
        tracer_provider: trace.TracerProvider | None = None,
        client: object = None,
    ) -> None:
        self.agent = agent
        self.capture_content = capture_content
        self.tracer = trace.get_tracer("turnstile", tracer_provider=tracer_provider)
        self.model_attributes: dict[str, Any] = {}
        if provider is not None:
            self.model_attributes["gen_ai.provider.name"] = provider
        model = model or getattr(client, "model", None)
        if isinstance(model, str):
            self.model_attributes["gen_ai.request.model"] = model
        self.model_attributes.update(_server(client))

    @contextlib.contextmanager
    def run(
        self, *, epoch_ns: int | None = None, spec: LoopSpec | None = None
    ) -> Iterator[Callable[[Event], None]]:
        """The `on_event` to give an executor: its spans are emitted as the run goes, the
        run's own when the block ends (an exception leaving it, or a last model call that
        failed, marks it an error). `epoch_ns`: the wall-clock time at which the executor's
        clock read 0, in ns since the Unix epoch (default: measured at the first event).
        `spec`: the run's, whose system prompt `capture_content` records (the events do not
        hold it)."""
        spans = _Spans(self, epoch_ns, None if spec is None else spec.system)
        try:
            yield spans.on_event
        except BaseException as e:
            spans.failed(e)
            raise
        finally:
            spans.close()

    def record(
        self,
        recorded: Run | LoopState | Sequence[Event] | str | os.PathLike[str],
        *,
        epoch_ns: int | None = None,
        spec: LoopSpec | None = None,
    ) -> None:
        """Emit the spans of a recorded run: a `Run`, a `LoopState`, its events, or the path of
        a journal. Times are the run's own, placed by `epoch_ns` as for `run`; by default the
        last event is now (for a journal: when it was last written). `spec` as for `run` (a
        `Run` knows its own)."""
        last_written: int | None = None
        if isinstance(recorded, str | os.PathLike):
            last_written = Path(recorded).stat().st_mtime_ns
            events: Sequence[Event] = Journal.read(recorded)
        elif isinstance(recorded, Run):
            events = recorded.state.events
            spec = spec or recorded.loop.spec
        elif isinstance(recorded, LoopState):
            events = recorded.events
        else:
            events = recorded
        if epoch_ns is None and events:
            end = last_written if last_written is not None else time.time_ns()
            epoch_ns = end - round(events[-1].now * 1e9)
        with self.run(epoch_ns=epoch_ns, spec=spec) as on_event:
            for event in events:
                on_event(event)
