"""The OpenAI Responses API (`POST /v1/responses`) as pure functions: bodies out, bodies in.

Requests are stateless (`store: false`): every call carries the whole history, and reasoning
items travel back verbatim (with their `encrypted_content`) beside the function calls they led to.
Function-call items have two ids: `call_id`, which results quote and which becomes
`ToolCall.id`, and the item's own `fc_…` id, which rides along in `provider_data`.

A stream's terminal event (`response.completed` / `response.incomplete`) carries the whole
Response, so the accumulator's result is `decode()` of that body: exact items, usage and status.
The deltas along the way are for showing progress; at the end they are checked against the
result, so a UI never showed text that the recorded reply does not contain.

Items the client must answer besides function calls (`local_shell_call`, `shell_call`,
`apply_patch_call`, `computer_call`, `custom_tool_call`, `mcp_approval_request`, a client-run
`tool_search_call`) are never routed as `ToolCall`s: turnstile declares only function tools (such
items come only from tools a caller adds through `tools=` options), and their answers are not a
tool result's text (a shell's exit code, a patch's status, an approval's yes or no, a
screenshot). So a completed reply holding one that the same reply does not answer (a hosted shell
answers its own call) stops with `ModelStop.requires_action` and the item's type as `raw_stop`,
never `end_turn` or `tool_use`: the API waits for an answer the loop cannot give, and the run
ends with `StopReason.requires_action`.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "decode", "encode"]

import copy
import json
from collections.abc import Callable, Iterable, Mapping
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
    for key, value in options.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": spec.name}
    if spec.description:
        tool["description"] = spec.description
    tool["parameters"] = spec.parameters
    tool["strict"] = False
    return tool


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
    """A reply's parts as input items, in order; adjacent texts share one message item.

    Thinking without a reasoning item in `provider_data` (another provider's) has no form here
    and is left out.
    """
    texts: list[dict[str, Any]] = []
    for part in parts:
        if type(part) is Text:
            if part.text:
                texts.append({"type": "output_text", "text": part.text})
            continue
        if texts:
            items.append({"type": "message", "role": "assistant", "content": texts})
            texts = []
        if type(part) is Thinking:
            data = part.provider_data
            if isinstance(data, dict) and data.get("type") == "reasoning":
                items.append(copy.deepcopy(data))
        elif type(part) is ToolCall:
            items.append(_function_call(part))
    if texts:
        items.append({"type": "message", "role": "assistant", "content": texts})


def _function_call(call: ToolCall) -> dict[str, Any]:
    kept = copy.deepcopy(call.provider_data) if isinstance(call.provider_data, dict) else {}
    item: dict[str, Any] = {"type": "function_call", **kept}
    item["call_id"] = call.id
    item["name"] = call.name
    item["arguments"] = _arguments_text(call, kept.get("arguments"))
    return item


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

    A function call whose item is `incomplete`, or which is the last item of a response that
    did not complete and is not `completed` itself, was cut off: `complete=False`, its text in
    `raw_arguments` and the members certainly whole as `arguments` (a whole JSON object is
    simply the arguments). Other calls are whole, whatever their item's status: in a completed
    response, calls a program the API runs made (programmatic tool calling) stay `in_progress`
    until their output comes back. An item the loop cannot answer stops the reply with
    `requires_action`, the item's type as `raw_stop` (see above).

    Raises `ProviderError` for a `failed` response or an error body (`{"error": {...}}`, as an
    HTTP error carries it) and `DecodeError` (with the offending path) for a body missing what
    it must have, such as a function call without its `call_id`.
    """
    if "status" not in expect(body, dict, "") and body.get("error") is not None:
        raise error_failure(body["error"], unexplained=False)
    status = field(body, "status", str, "")
    if status == "failed":
        raise _failure(body.get("error"))
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
            cut = _cut(item.get("status"), finished=status == "completed", last=i == last)
            content.append(_tool_call(item, where, cut=cut))
    called = any(type(p) is ToolCall for p in content)
    stop, raw_stop = _stop(body, status, refused, called, _waiting(output))
    return reply(content, stop, _usage(body), raw_stop)


def _cut(status: Any, *, finished: bool, last: bool) -> bool:
    """Whether a call was cut off: its item says so, or the reply did not complete and the call
    is its last item, not `completed`."""
    return status == "incomplete" or (not finished and last and status != "completed")


def _waiting(output: list[dict[str, Any]]) -> str | None:
    """The type of the first item the client must answer that `output` does not answer itself
    (a hosted shell's output follows its call), or None."""
    kinds = [item.get("type") for item in output]
    given = set()
    for kind, item in zip(kinds, output, strict=True):
        key = _ANSWER_KEYS.get(kind) if isinstance(kind, str) else None
        if key is not None and isinstance(item.get(key), str):
            given.add((kind, item[key]))
    for kind, item in zip(kinds, output, strict=True):
        if not isinstance(kind, str) or kind not in _ANSWERS:
            continue
        if kind == "tool_search_call" and item.get("execution") != "client":
            continue  # the server ran it
        answer, _, key = _ANSWERS[kind]
        if not isinstance(item.get(key), str) or (answer, item[key]) not in given:
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
    parts = field(item, "content", list, where)
    texts: list[Part] = []
    refused = False
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        key = _TEXT_FIELDS.get(kind) if isinstance(kind, str) else None
        if key is not None:
            texts.append(Text(field(part, key, str, f"{where}.content[{j}]")))
            refused = refused or kind == "refusal"
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
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if reason == "max_output_tokens":
            return ModelStop.max_tokens, None
        if reason == "content_filter":
            return ModelStop.content_filter, None
        return ModelStop.other, reason if isinstance(reason, str) else status
    return ModelStop.other, status


def _usage(body: dict[str, Any]) -> Usage:
    usage = optional(body, "usage", dict, "", None)
    if usage is None:
        return Usage()
    inputs = optional(usage, "input_tokens_details", dict, "usage", {})
    outputs = optional(usage, "output_tokens_details", dict, "usage", {})
    at_inputs, at_outputs = "usage.input_tokens_details", "usage.output_tokens_details"
    return Usage(
        input_tokens=count(usage, "input_tokens", "usage"),
        output_tokens=count(usage, "output_tokens", "usage"),
        cache_read_tokens=count(inputs, "cached_tokens", at_inputs, 0),
        cache_write_tokens=count(inputs, "cache_write_tokens", at_inputs, 0),
        reasoning_tokens=count(outputs, "reasoning_tokens", at_outputs, 0),
    )


def _failure(error: Any) -> ProviderError:
    """The `ProviderError` for the error object of a failed response or an `error` event.

    Unexplained failures and server-side codes (overloaded, rate limit, server error) are
    retryable; the rest (invalid prompt, policy, bad image, quota, ...) are not.
    """
    if not isinstance(error, Mapping):
        return ProviderError("failed", "the response failed without saying why", retryable=True)
    return error_failure(error, unexplained=True)


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
        self._calls: dict[str, tuple[int, str, str]] = {}  # fc item id -> index, call_id, name
        self._call_at: dict[int, tuple[int, str, str]] = {}  # output_index -> the same
        self._summaries: dict[int, int] = {}  # output_index -> summary parts announced
        self._contents: dict[int, int] = {}  # output_index -> content parts begun
        self._opened: set[int] = set()
        self._done_items: dict[int, dict[str, Any]] = {}
        self._result: ModelResponse | None = None
        self._error: ProviderError | None = None

    def feed(self, event: dict[str, Any]) -> list[Delta]:
        """Take one event; returns the deltas it yields (often none).

        Raises `ProviderError` for an `error` event or `response.failed`, `DecodeError` for an
        event that lacks what it must carry. Unknown event types are ignored.
        """
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
                ci = self._content(event, at)
                part = self._parts.get((at, ci))
                if part is None:
                    part = self._new((at, ci), Text)
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
                response = event.get("response")
                error = response.get("error") if isinstance(response, dict) else None
                self._error = _failure(error)
                raise self._error
            case "error":
                # Documented: code and message on the event; seen in the wild: an `error` object.
                error = event.get("error")
                if not isinstance(error, dict):
                    error = {"code": event.get("code"), "message": event.get("message")}
                self._error = _failure(error)
                raise self._error
        return []

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

    # -- building parts ------------------------------------------------------------------------

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
            call = (self._new((at, -1), ToolCall), call_id, name)
            self._call_at[at] = call
            if isinstance(item.get("id"), str):
                self._calls[item["id"]] = call
            text = item.get("arguments")
            return self._emit_arguments(call, text if isinstance(text, str) else "")
        deltas: list[Delta] = []
        if kind == "reasoning":
            self._new((at, -1), Thinking)
            summary = item.get("summary")
            for si, entry in enumerate(summary if isinstance(summary, list) else []):
                text = entry.get("text") if isinstance(entry, dict) else None
                deltas += self._summary(at, si, text if isinstance(text, str) else "")
        elif kind == "message":
            content = item.get("content")
            for ci, part in enumerate(content if isinstance(content, list) else []):
                deltas += self._text_part(at, ci, part)
        return deltas

    def _text_part(self, at: int, ci: int, part: Any) -> list[Delta]:
        kind = part.get("type") if isinstance(part, dict) else None
        key = _TEXT_FIELDS.get(kind) if isinstance(kind, str) else None
        if key is None or (at, ci) in self._parts:
            return []
        index = self._new((at, ci), Text)
        text = part.get(key)  # type: ignore[union-attr]
        return self._emit(index, text, TextDelta) if isinstance(text, str) else []

    def _arguments(self, event: dict[str, Any]) -> list[Delta]:
        """Arguments deltas name their item by its `fc_…` id; results need the call's call_id."""
        item_id = event.get("item_id")
        call = self._calls.get(item_id) if isinstance(item_id, str) else None
        if call is None:
            call = self._call_at.get(self._item(event))
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

    # -- the end -------------------------------------------------------------------------------

    def _finish(self, response: dict[str, Any]) -> ModelResponse:
        if not response.get("output") and self._opened:
            if self._opened - self._done_items.keys():
                raise DecodeError("output", "empty, and the stream left items unfinished")
            response = {**response, "output": [self._done_items[i] for i in sorted(self._opened)]}
        result = decode(response)
        for n, kind in enumerate(self._kinds):
            if n >= len(result.content) or type(result.content[n]) is not kind:
                raise DecodeError("output", f"the stream built part {n}, which the reply lacks")
            shown = self._shown[n].text()
            if not _visible(result.content[n]).startswith(shown):
                raise DecodeError("output", f"part {n} differs from what the stream showed")
        return result


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, **options)`; see
    `WireClient`."""

    wire = Wire("openai", "/responses", "gpt-5.1", encode, decode, StreamAccumulator)
