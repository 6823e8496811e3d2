"""The OpenAI Responses API (`POST /v1/responses`) as pure functions: bodies out, bodies in.

Requests are stateless (`store: false`): every call carries the whole history, and reasoning
items travel back verbatim (with their `encrypted_content`) beside the function calls they led to.
Function-call items have two ids: `call_id`, which results quote and which becomes
`ToolCall.id`, and the item's own `fc_…` id, which rides along in `provider_data`.

A stream's terminal event (`response.completed` / `response.incomplete`) carries the whole
Response, so the accumulator's result is `decode()` of that body; the deltas shown along the way
are checked against it at the end, so a UI never showed text the recorded reply lacks.

Items the client must answer besides function calls (`local_shell_call`, `shell_call`,
`apply_patch_call`, `computer_call`, `custom_tool_call`, `mcp_approval_request`, a client-run
`tool_search_call`) come only from tools a caller adds through `tools=` options, and their answers
are not a tool result's text (an exit code, a patch's status, a yes or no, a screenshot). So they
never become `ToolCall`s: a completed reply holding one it does not answer itself (a hosted shell
does) stops with `ModelStop.requires_action`, the item's type as `raw_stop`, since the API waits
for an answer the loop cannot give; the run ends with `StopReason.requires_action`.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from turnstile.core import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    ModelStop,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    ToolSpec,
    Usage,
    UserMessage,
)

from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._deltas import ArgumentsDelta, Delta, TextDelta, ThinkingDelta
from ._errors import DecodeError, ProviderError
from ._failures import error_failure
from ._text import Pieces, heal
from ._wire import (
    count,
    expect,
    field,
    index,
    json_object,
    kept,
    optional,
    peek,
    reply,
    tool_call,
    tool_call_id,
)

SUMMARY_JOIN = "\n\n"
_TEXT_FIELDS = {"output_text": "text", "refusal": "refusal"}
# Fields of a function_call item that `ToolCall` holds itself; the rest go to `provider_data`.
_CALL_FIELDS = ("type", "call_id", "name", "status")
# An item only the client can answer, other than a function call: the item type answering it,
# the key of the call it answers, and the call's key that holds that value.
_ANSWERS = {
    "local_shell_call": ("local_shell_call_output", "id", "call_id"),
    "shell_call": ("shell_call_output", "call_id", "call_id"),
    "apply_patch_call": ("apply_patch_call_output", "call_id", "call_id"),
    "computer_call": ("computer_call_output", "call_id", "call_id"),
    "custom_tool_call": ("custom_tool_call_output", "call_id", "call_id"),
    "mcp_approval_request": ("mcp_approval_response", "approval_request_id", "id"),
    "tool_search_call": ("tool_search_output", "call_id", "call_id"),
}
_ANSWER_KEYS = {answer: key for answer, key, _ in _ANSWERS.values()}
# The reasons an `incomplete` response gives (`incomplete_details.reason`) that a stop names.
_STOPS = {"max_output_tokens": ModelStop.max_tokens, "content_filter": ModelStop.content_filter}


# -- encoding --------------------------------------------------------------------------------------


def encode(
    request: ModelRequest, *, model: str, cache: WireCache | None = None, **options: Any
) -> dict[str, Any]:
    """The JSON body for `POST /v1/responses`.

    Defaults: `store: false` and `include: ["reasoning.encrypted_content"]`, so reasoning can be
    sent back without server-side state; tools go with `strict: false`, because the API otherwise
    rewrites their schemas into strict mode (every field required). `options` are merged over the
    body (`stream=True`, `reasoning={"effort": "low"}`, ...); an option set to None removes that
    key, e.g. `include=None` for a model that rejects encrypted reasoning (gpt-4o, gpt-4.1).

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    items of `input` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.
    """
    body: dict[str, Any] = {"model": model}
    if request.system is not None:
        body["instructions"] = request.system
    body["input"] = folded(_fold, request.messages, cache)
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    body["max_output_tokens"] = request.max_tokens
    body["store"] = False
    body["include"] = ["reasoning.encrypted_content"]
    body.update(options)
    return {key: value for key, value in body.items() if value is not None or key not in options}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    return {**tool, "parameters": spec.parameters, "strict": False}


def _fold(items: list[dict[str, Any]], messages: Iterable[Message]) -> None:
    for message in messages:
        match message:
            case UserMessage(content=content):
                items.append({"type": "message", "role": "user", "content": content})
            case AssistantMessage(content=parts):
                _assistant(parts, items)
            case ToolResults(results=results):
                items.extend(
                    {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
                    for r in results
                )


def _assistant(parts: list[Part], items: list[dict[str, Any]]) -> None:
    """A reply's parts as input items, in order; adjacent texts share one message item. Thinking
    without a reasoning item in `provider_data` (another provider's) has no form here: left out."""
    texts: list[dict[str, Any]] = []
    for part in [*parts, None]:  # None ends the last run of texts
        if type(part) is Text:
            if part.text:
                texts.append({"type": "output_text", "text": part.text})
            continue
        if texts:
            items.append({"type": "message", "role": "assistant", "content": texts})
            texts = []
        if type(part) is ToolCall:
            items.append(_function_call(part))
        elif type(part) is Thinking and peek(part.provider_data, "type", str, "") == "reasoning":
            items.append(copy.deepcopy(part.provider_data))


def _function_call(call: ToolCall) -> dict[str, Any]:
    kept = copy.deepcopy(call.provider_data) if isinstance(call.provider_data, dict) else {}
    item = {"type": "function_call", **kept, "call_id": call.id, "name": call.name}
    return {**item, "arguments": _arguments_text(call, kept.get("arguments"))}


def _arguments_text(call: ToolCall, kept: Any) -> str:
    """The arguments as the model wrote them while still true to `call`, else re-serialized."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    if isinstance(kept, str) and (json_object(kept) if kept.strip() else {}) == call.arguments:
        return kept
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


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
        kind = expect(item, dict, where).get("type")
        if kind == "reasoning":
            content.append(_thinking(item, where))
        elif kind == "message":
            texts, refusal = _message(item, where)
            content.extend(texts)
            refused = refused or refusal
        elif kind == "function_call":
            ended = status != "completed" and i == last and item.get("status") != "completed"
            cut = ended or item.get("status") == "incomplete"
            content.append(_tool_call(item, where, cut=cut))
    called = any(type(p) is ToolCall for p in content)
    stop, raw_stop = _stop(body, status, refused, called, _waiting(output))
    return reply(content, stop, _usage(body), raw_stop)


def _waiting(output: list[dict[str, Any]]) -> str | None:
    """The type of the first item the client must answer that `output` does not answer itself
    (a hosted shell's output follows its call; the server may run a tool search), or None."""
    typed = [(peek(item, "type", str, ""), item) for item in output]
    given = {(k, peek(item, _ANSWER_KEYS[k], str, None)) for k, item in typed if k in _ANSWER_KEYS}
    for kind, item in typed:
        if kind in _ANSWERS and (kind != "tool_search_call" or item.get("execution") == "client"):
            answer, _, key = _ANSWERS[kind]
            ref = peek(item, key, str, None)
            if ref is None or (answer, ref) not in given:
                return kind
    return None


def _thinking(item: dict[str, Any], where: str) -> Thinking:
    field(item, "id", str, where)
    texts = []
    for j, entry in enumerate(field(item, "summary", list, where)):
        at = f"{where}.summary[{j}]"
        texts.append(field(expect(entry, dict, at), "text", str, at))
    return Thinking(SUMMARY_JOIN.join(texts), provider_data=kept(item, where))


def _message(item: dict[str, Any], where: str) -> tuple[list[Part], bool]:
    """The text parts of a message item, and whether one of them is a refusal."""
    texts: list[Part] = []
    refused = False
    for j, part in enumerate(field(item, "content", list, where)):
        key = _TEXT_FIELDS.get(peek(part, "type", str, ""))
        if key is not None:
            texts.append(Text(field(part, key, str, f"{where}.content[{j}]")))
            refused = refused or key == "refusal"
    return texts, refused


def _tool_call(item: dict[str, Any], where: str, *, cut: bool) -> ToolCall:
    call_id = tool_call_id(item, "call_id", where)
    name = field(item, "name", str, where)
    text = field(item, "arguments", str, where)
    extra = kept({k: v for k, v in item.items() if k not in _CALL_FIELDS}, where)
    return tool_call(call_id, name, text, cut=cut, provider_data=extra)


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

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        """Take one event; returns the deltas it yields (often none). Raises `ProviderError` for
        an `error` event or `response.failed`, `DecodeError` for an event lacking what it must
        carry; unknown event types are ignored."""
        if self._result is not None or self._error is not None:
            return []
        match expect(event, dict, "").get("type"):
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
        return deltas

    def _text_part(self, at: int, ci: int, part: Any) -> list[Delta]:
        key = _TEXT_FIELDS.get(peek(part, "type", str, ""))
        if key is None or (at, ci) in self._parts:
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
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, **options)`; see
    `WireClient`."""

    wire = Wire("openai", "/responses", "gpt-5.1", encode, decode, StreamAccumulator)
