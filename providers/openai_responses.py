"""The OpenAI Responses API (`POST /v1/responses`) as pure functions: bodies out, bodies in.

Requests are stateless (`store: false`): every call carries the whole history, and reasoning
items travel back verbatim (with their `encrypted_content`) beside the function calls they led to;
a `Client(store=True)` names the stored response a history continues instead (`_responses_items`).
Function-call items have two ids: `call_id`, which results quote and which becomes
`ToolCall.id`, and the item's own `fc_…` id, which rides along in `provider_data`.

Every output item the codec does not read itself (a hosted tool's call or result: web search,
file search, code interpreter, image generation, MCP; a program; a type newer than the codec) is
an `Opaque` part, and goes back verbatim in the next request's input; an item under an unknown
type that has a function call's `call_id`, `name` and `arguments` is a garbled call, a
`DecodeError`. The conversation's items and parts are written by `_responses_items`.

A stream's terminal event (`response.completed` / `response.incomplete`) carries the whole
Response, so the accumulator's result is `decode()` of that body; the deltas shown along the way
are checked against it at the end, so a UI never showed text the recorded reply lacks.

Items the client must answer besides function calls (`local_shell_call`, `shell_call`,
`apply_patch_call`, `computer_call`, `custom_tool_call`, `mcp_approval_request`, a client-run
`tool_search_call`) come only from tools a caller adds through `tools=` options, and their answers
are not a tool result's text (an exit code, a patch's status, a yes or no, a screenshot). So they
are kept as `Opaque`, never `ToolCall`s: a completed reply holding one it does not answer itself
(a hosted shell does) stops with `ModelStop.requires_action`, the item's type as `raw_stop`,
since the API waits for an answer the loop cannot give; the run ends with
`StopReason.requires_action`.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

from collections.abc import Callable
from typing import Any

import msgspec
from turnstile.core import ModelRequest
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    Usage,
)

from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._deltas import ArgumentsDelta, Delta, TextDelta, ThinkingDelta
from ._errors import DecodeError, ProviderError
from ._failures import error_failure
from ._responses_items import (
    SUMMARY_JOIN,
    TEXT_FIELDS,
    chained,
    fold,
    function_call,
    message,
    other_item,
    reasoning,
    stored,
    waiting,
)
from ._responses_tools import text_format, tool_choice
from ._responses_tools import tools as _tools
from ._text import Pieces, heal
from ._wire import (
    count,
    expect,
    field,
    index,
    kept,
    optional,
    peek,
    reply,
    tool_call_id,
)

# The reasons an `incomplete` response gives (`incomplete_details.reason`) that a stop names.
_STOPS = {"max_output_tokens": ModelStop.max_tokens, "content_filter": ModelStop.content_filter}


# -- encoding --------------------------------------------------------------------------------------


def encode(
    request: ModelRequest, *, model: str, cache: WireCache | None = None, **options: Any
) -> dict[str, Any]:
    """The JSON body for `POST /v1/responses`.

    Defaults: `store: false` and `include: ["reasoning.encrypted_content"]`, so reasoning can be
    sent back without server-side state. Tools, `tool_choice` (written unless "auto", the API's
    default) and `text.format` are written by `_responses_tools`; with caching on,
    `prompt_cache_key` is the policy's key or else the conversation's (`request.cache_key`).
    `options` are merged over the body (`stream=True`, `reasoning={"effort": "low"}`, ...); an
    option set to None removes that key, e.g. `include=None` for a model that rejects encrypted
    reasoning (gpt-4o, gpt-4.1).

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    items of `input` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it. Raises `UnsupportedContent` for a part this
    format cannot carry (audio, another format's `Opaque`).
    """
    body: dict[str, Any] = {"model": model}
    if request.system is not None:
        body["instructions"] = request.system
    body["input"] = folded(fold, request.messages, cache)
    if tools := _tools(request):
        body["tools"] = tools
    if request.tool_choice != "auto":
        body["tool_choice"] = tool_choice(request.tool_choice)
    if request.output is not None:
        body["text"] = {"format": text_format(request.output)}
    body["max_output_tokens"] = request.max_tokens
    body["store"] = False
    body["include"] = ["reasoning.encrypted_content"]
    if request.cache is not None and request.cache.enabled:
        key = request.cache.key or request.cache_key
        if key is not None:
            body["prompt_cache_key"] = key
    body.update(options)
    return {key: value for key, value in body.items() if value is not None or key not in options}


# -- decoding --------------------------------------------------------------------------------------


def decode(body: dict[str, Any]) -> ModelResponse:
    """A Response object as a `ModelResponse`.

    A function call was cut off (`complete=False`, as `_wire.tool_call` reads it) when its item
    is `incomplete`, or is the last of a response that did not complete and is not `completed`
    itself. Other calls are whole whatever their status: in a completed response, calls made by
    a program the API runs (programmatic tool calling) stay `in_progress`.

    Raises `ProviderError` for a `failed` response or an error body (`{"error": {...}}`, as an
    HTTP error carries it), `DecodeError` (with its path) for a body missing what it must have.
    """
    if "status" not in expect(body, dict, "") and body.get("error") is not None:
        raise error_failure(body["error"], unexplained=False)
    status = field(body, "status", str, "")
    if status == "failed":
        raise error_failure(body.get("error"), unexplained=True)
    output = field(body, "output", list, "")
    content: list[Part] = []
    refused = False
    last = len(output) - 1
    for i, item in enumerate(output):
        where = f"output[{i}]"
        kind = field(expect(item, dict, where), "type", str, where)
        if kind == "reasoning":
            content.append(reasoning(item, where))
        elif kind == "message":
            apart = i > 0 and peek(output[i - 1], "type", str, "") == "message"
            texts, refusal = message(item, where, apart=apart)
            content.extend(texts)
            refused = refused or refusal
        elif kind == "function_call":
            ended = status != "completed" and i == last and item.get("status") != "completed"
            cut = ended or item.get("status") == "incomplete"
            content.append(function_call(item, where, cut=cut))
        else:
            content.append(other_item(item, kind, where))
    called = any(type(p) is ToolCall for p in content)
    stop, raw_stop = _stop(body, status, refused, called, waiting(output))
    return reply(content, stop, _usage(body), raw_stop, body)


def _stop(
    body: dict[str, Any], status: str, refused: bool, called: bool, waiting: str | None
) -> tuple[ModelStop, str | None]:
    if status == "completed":
        if refused:
            return ModelStop.refusal, None
        if waiting is not None:
            return ModelStop.requires_action, waiting
        return (ModelStop.tool_use if called else ModelStop.end_turn), None
    if status == "incomplete":
        reason = peek(body.get("incomplete_details"), "reason", str, status)
        return (_STOPS[reason], None) if reason in _STOPS else (ModelStop.other, reason)
    return ModelStop.other, status


def _usage(body: dict[str, Any]) -> Usage:
    usage = optional(body, "usage", dict, "", None)
    if usage is None:
        return Usage()
    inputs = optional(usage, "input_tokens_details", dict, "usage", {})
    outputs = optional(usage, "output_tokens_details", dict, "usage", {})
    return Usage(
        input_tokens=count(usage, "input_tokens", "usage"),
        output_tokens=count(usage, "output_tokens", "usage"),
        cache_read_tokens=count(inputs, "cached_tokens", "usage.input_tokens_details", 0),
        cache_write_tokens=count(inputs, "cache_write_tokens", "usage.input_tokens_details", 0),
        reasoning_tokens=count(outputs, "reasoning_tokens", "usage.output_tokens_details", 0),
    )


# -- streaming -------------------------------------------------------------------------------------


def _visible(part: Part) -> str:
    """What the deltas of `part` add up to: its text, or a call's arguments as written."""
    if type(part) is ToolCall:
        return part.provider_data["arguments"]
    if type(part) is Opaque:
        return ""
    return part.text  # type: ignore[union-attr]


class StreamAccumulator:
    """Builds one `ModelResponse` from the parsed `data` payloads of a Responses event stream.

    `feed()` takes each event and returns the deltas a UI can show at once; `result()` is
    `decode()` of the terminal event's response. Part indices in deltas are positions in that
    result's `content`; a character split across two deltas is held back until it is whole.
    """

    def __init__(self) -> None:
        self._kinds: list[type] = []  # part index -> the Part type its deltas build
        self._shown: list[Pieces] = []  # part index -> the text its deltas showed
        self._parts: dict[tuple[int, int], int] = {}  # (output_index, content_index) -> index
        # output_index, and the item's `fc_…` id if it has one -> part index, call_id, name
        self._calls: dict[int | str, tuple[int, str, str]] = {}
        self._summaries: dict[int, int] = {}  # output_index -> summary parts announced
        self._contents: dict[int, int] = {}  # output_index -> content parts begun
        self._opened: set[int] = set()
        self._done_items: dict[int, dict[str, Any]] = {}
        self._result: ModelResponse | None = None
        self._error: ProviderError | None = None
        self._resumable: tuple[str, int] | None = None  # a background reply's id, last event

    def resume_point(self) -> tuple[str, int] | None:
        """The reply's id and the `sequence_number` of the last event read, to ask for the rest
        of the stream after (`starting_after`); None unless the reply runs in background mode,
        the only one the API keeps streaming from."""
        return self._resumable

    def _follow(self, event: dict[str, Any]) -> None:
        """Keep the resume point: a lifecycle event's response says whether it runs in background
        mode (only then are event numbers kept)."""
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            background = response.get("background") is True
            self._resumable = (response["id"], -1) if background else None
        if self._resumable is not None and type(event.get("sequence_number")) is int:
            self._resumable = (self._resumable[0], event["sequence_number"])

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        """Take one event; returns the deltas it yields (often none). Raises `ProviderError` for
        an `error` event or `response.failed`, `DecodeError` for an event lacking what it must
        carry; unknown event types are ignored."""
        if self._result is not None or self._error is not None:
            return []
        self._follow(expect(event, dict, ""))
        match event.get("type"):
            case "response.output_item.added":
                at, item = self._item(event), field(event, "item", dict, "")
                self._opened.add(at)
                return self._open(at, item)
            case "response.output_item.done":
                at, item = self._item(event), field(event, "item", dict, "")
                deltas = [] if at in self._opened else self._open(at, item)
                self._opened.add(at)
                self._done_items[at] = kept(item, "item")
                return deltas
            case "response.content_part.added":
                at = self._item(event)
                return self._text_part(at, self._content(event, at), event.get("part"))
            case "response.output_text.delta" | "response.refusal.delta":
                at = self._item(event)
                key = (at, self._content(event, at))
                part = self._parts[key] if key in self._parts else self._new(key, Text)
                return self._emit(part, field(event, "delta", str, ""), TextDelta)
            case "response.function_call_arguments.delta":
                return self._arguments(event)
            case "response.reasoning_summary_part.added":
                at = self._item(event)
                return self._summary(at, self._summary_index(event, at), "")
            case "response.reasoning_summary_text.delta":
                at = self._item(event)
                si = self._summary_index(event, at)
                return self._summary(at, si, field(event, "delta", str, ""))
            case "response.completed" | "response.incomplete":
                self._result = self._finish(field(event, "response", dict, ""))
                return []
            case "response.failed":
                error = peek(event.get("response"), "error", object, None)
            case "error":
                # Documented: code and message on the event; seen in the wild: an `error` object.
                error = event.get("error")
                if not isinstance(error, dict):
                    error = {"code": event.get("code"), "message": event.get("message")}
            case _:
                return []
        self._error = error_failure(error, unexplained=True)
        raise self._error

    def result(self) -> ModelResponse:
        """The reply; raises the stream's `ProviderError`, or `incomplete_stream` when it ended
        before a terminal event."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise ProviderError(
                "incomplete_stream",
                "the stream ended before response.completed or response.incomplete",
                retryable=True,
            )
        return self._result

    # -- indices: each names a thing begun, or the next one --------------------------------------

    def _item(self, event: dict[str, Any]) -> int:
        return index(event, "output_index", "", len(self._opened))

    def _content(self, event: dict[str, Any], at: int) -> int:
        return index(event, "content_index", "", self._contents.get(at, 0))

    def _summary_index(self, event: dict[str, Any], at: int) -> int:
        return index(event, "summary_index", "", self._summaries.get(at, 0))

    def _new(self, key: tuple[int, int], kind: type) -> int:
        at, ci = key
        if ci >= 0:
            self._contents[at] = max(self._contents.get(at, 0), ci + 1)
        self._parts[key] = len(self._kinds)
        self._kinds.append(kind)
        self._shown.append(Pieces())
        return self._parts[key]

    def _emit(self, index: int, fragment: str, make: Callable[[int, str], Delta]) -> list[Delta]:
        text = self._shown[index].add(fragment)
        return [make(index, text)] if text else []

    def _open(self, at: int, item: dict[str, Any]) -> list[Delta]:
        """Give a new output item its part(s), with whatever text it already carries."""
        kind = item.get("type")
        if kind == "function_call":
            call_id = tool_call_id(item, "call_id", "item")
            name = heal(field(item, "name", str, "item"))
            self._calls[at] = call = (self._new((at, -1), ToolCall), call_id, name)
            if isinstance(item.get("id"), str):
                self._calls[item["id"]] = call
            return self._emit_arguments(call, peek(item, "arguments", str, ""))
        deltas: list[Delta] = []
        if kind == "reasoning":
            self._new((at, -1), Thinking)
            for si, entry in enumerate(peek(item, "summary", list, [])):
                deltas += self._summary(at, si, peek(entry, "text", str, ""))
        elif kind == "message":
            for ci, part in enumerate(peek(item, "content", list, [])):
                deltas += self._text_part(at, ci, part)
        else:
            self._new((at, -1), Opaque)  # kept as it comes: no deltas
        return deltas

    def _text_part(self, at: int, ci: int, part: Any) -> list[Delta]:
        if (at, ci) in self._parts:
            return []
        key = TEXT_FIELDS.get(peek(part, "type", str, ""))
        if key is None:
            self._new((at, ci), Opaque)
            return []
        return self._emit(self._new((at, ci), Text), peek(part, key, str, ""), TextDelta)

    def _arguments(self, event: dict[str, Any]) -> list[Delta]:
        """Arguments deltas name their item by its `fc_…` id; results need the call's call_id."""
        call = self._calls.get(peek(event, "item_id", str, -1))  # -1: no output index
        if call is None:
            call = self._calls.get(self._item(event))
        if call is None:
            raise DecodeError("item_id", "arguments for a function call that was never opened")
        return self._emit_arguments(call, field(event, "delta", str, ""))

    def _emit_arguments(self, call: tuple[int, str, str], fragment: str) -> list[Delta]:
        index, call_id, name = call
        return self._emit(index, fragment, lambda i, t: ArgumentsDelta(i, call_id, name, t))

    def _summary(self, at: int, si: int, fragment: str) -> list[Delta]:
        """Summary text; parts after the first start with the separator `decode` joins with."""
        part = self._parts.get((at, -1))
        if part is None or self._kinds[part] is not Thinking:
            raise DecodeError("output_index", "summary text for a reasoning item never opened")
        announced = self._summaries.get(at, 0)
        if si >= announced:  # the next part (`_summary_index` allows no later one)
            fragment = SUMMARY_JOIN * (si + 1 - max(announced, 1)) + fragment
            self._summaries[at] = si + 1
        return self._emit(part, fragment, ThinkingDelta)

    def _finish(self, response: dict[str, Any]) -> ModelResponse:
        if not response.get("output") and self._opened:
            if self._opened - self._done_items.keys():
                raise DecodeError("output", "empty, and the stream left items unfinished")
            response = {**response, "output": [self._done_items[i] for i in sorted(self._opened)]}
        result = decode(response)
        for n, (kind, shown) in enumerate(zip(self._kinds, self._shown, strict=True)):
            if n >= len(result.content) or type(result.content[n]) is not kind:
                raise DecodeError("output", f"the stream built part {n}, which the reply lacks")
            if not _visible(result.content[n]).startswith(shown.text()):
                raise DecodeError("output", f"part {n} differs from what the stream showed")
        return result


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, sdk_retries=False,
    **options)`; see `WireClient` (the SDK's own retries are off unless `sdk_retries=True`).
    `store=True` continues stored responses; `background=True` needs `stream=True` (ValueError)."""

    wire = Wire("openai", "/responses", "gpt-5.1", encode, decode, StreamAccumulator)

    def __init__(self, sdk: Any, **kwargs: Any) -> None:
        super().__init__(sdk, **kwargs)
        if self.options.get("background") and not self.stream:
            raise ValueError("background=True needs stream=True: a queued reply is not polled")

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """With `store=True`, a history that continues a response this server stored sends only
        what follows it, naming it as `previous_response_id` (`_responses_items.chained`)."""
        model, store = request.model or self.model, self.options.get("store")
        chain = chained(request.messages, str(self.sdk.base_url), model) if store else None
        if chain is None:
            return super()._body(request)
        rest = msgspec.structs.replace(request, messages=list(request.messages[chain[1] :]))
        stream = {"stream": True} if self.stream else {}
        options = {**stream, **self.options, "previous_response_id": chain[0]}
        return self.wire.encode(rest, model=model, **options)

    def _received(self, request: ModelRequest, reply: ModelResponse) -> ModelResponse:
        if not self.options.get("store"):
            return reply
        return stored(reply, request.messages, str(self.sdk.base_url), request.model or self.model)
