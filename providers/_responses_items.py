"""The conversation as OpenAI Responses input items: what `openai_responses.encode` sends as
`input`, one message at a time (a left fold, as `_cache` continues it).

Parts map one to one: `Text` is `input_text`, `Image` is `input_image` (its URL, its data as a
`data:` URL, or its `file_id`; `detail` "auto" unless given, as the API defaults), `Document` is
`input_file` (`file_data` as a `data:` URL with `filename`, `file_url`, or `file_id`); a tool's
parts are a `function_call_output` whose `output` is that list. An `Opaque` item of this format
goes back as it came. This format has no input part for sound (the SDK's message content union
has none) nor a field for a document's `title` (Anthropic's): audio, and any other format's
`Opaque`, raise `UnsupportedContent`; a title is left out, the file's name is what it is called
here. `Instructions` are a message item of their role ("system" or "developer").

A reply's parts go back in order: texts as assistant message items (adjacent texts of one phase
share one, unless a text is marked to begin its own, as it did in the reply), calls as
`function_call` items, reasoning and kept items verbatim. A reply from another format may hold
what has no form here (another provider's thinking, its server blocks): left out, as that
provider's own history keeps it.

Server-side state (`store=True`): a reply the server stored is `stored`, its last text or call
keeping under `STORED` the response's id, the server's URL, the model asked, and how many
messages, of which digest, it answered; `chained` reads that back from a history. A part's
`STORED` never goes on the wire.
"""

from __future__ import annotations

__all__ = [
    "FORMAT",
    "STORED",
    "SUMMARY_JOIN",
    "TEXT_FIELDS",
    "chained",
    "fold",
    "function_call",
    "message",
    "other_item",
    "reasoning",
    "stored",
    "waiting",
]

import base64
import copy
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Message,
    ModelResponse,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)

from ._errors import DecodeError, UnsupportedContent
from ._wire import expect, field, json_object, kept, optional, peek, tool_call, tool_call_id

FORMAT = "openai_responses"
"""This format's name, as `Opaque.format` and `ServerTool.format` give it."""
SUMMARY_JOIN = "\n\n"
"""What joins the summary parts of a reasoning item into one `Thinking` text."""
STORED = "stored"
"""The key of a stored reply's mark in its last text's or call's `provider_data`."""
APART = "apart"
"""The key in a text's `provider_data` that makes it begin a message item of its own."""
TEXT_FIELDS = {"output_text": "text", "refusal": "refusal"}
"""The text parts of a message item, and the key of their text."""
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
# Fields of a function_call item that `ToolCall` holds itself; the rest go to `provider_data`.
_CALL_FIELDS = ("type", "call_id", "name", "status")


def fold(items: list[dict[str, Any]], messages: Iterable[Message]) -> None:
    """Append the input items of `messages` to `items` (a `_cache.Fold`)."""
    for message in messages:
        match message:
            case UserMessage(content=str() as text):
                items.append({"type": "message", "role": "user", "content": text})
            case UserMessage(content=parts):
                content = [_part(p, "a user message") for p in parts]
                items.append({"type": "message", "role": "user", "content": content})
            case AssistantMessage(content=parts):
                _assistant(parts, items)
            case ToolResults(results=results):
                items.extend(_output(r) for r in results)
            case Instructions(text=text, role=role):
                items.append({"type": "message", "role": role, "content": text})


def _output(result: ToolResult) -> dict[str, Any]:
    content = result.content
    output = content if isinstance(content, str) else [_part(p, "a tool result") for p in content]
    return {"type": "function_call_output", "call_id": result.call_id, "output": output}


def _part(part: Any, where: str) -> dict[str, Any]:
    """One part of a user message or a tool result, as an input content part."""
    match part:
        case Text(text=text):
            return {"type": "input_text", "text": text}
        case Image():
            image: dict[str, Any] = {"type": "input_image", "detail": part.detail or "auto"}
            if part.file_id is not None:
                return {**image, "file_id": part.file_id}
            return {**image, "image_url": part.url or _data_url(part.media_type, part.data)}
        case Document():
            file: dict[str, Any] = {"type": "input_file"}
            if part.file_id is not None:
                file["file_id"] = part.file_id
            elif part.url is not None:
                file["file_url"] = part.url
            else:
                file["file_data"] = _data_url(part.media_type, part.data)
            return file if part.name is None else {**file, "filename": part.name}
        case Opaque(format=format, data=data) if format == FORMAT:
            return copy.deepcopy(data)
        case Opaque(format=format):
            raise UnsupportedContent(FORMAT, f"{format} content in {where}")
        case Audio():
            raise UnsupportedContent(FORMAT, f"audio in {where}")
    raise UnsupportedContent(FORMAT, f"a part of type {type(part).__name__} in {where}")


def _data_url(media_type: str | None, data: bytes | None) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data or b'').decode('ascii')}"


def _assistant(parts: list[Part], items: list[dict[str, Any]]) -> None:
    """A reply's parts as input items, in order; adjacent texts of one phase share a message."""
    texts: list[dict[str, Any]] = []
    phase = None
    for part in [*parts, None]:  # None ends the last run of texts
        kept = part.provider_data if type(part) is Text else None
        apart = peek(kept, APART, bool, False)
        if type(part) is Text and not part.text and not apart:
            continue
        if texts and (type(part) is not Text or apart or peek(kept, "phase", str, None) != phase):
            message = {"type": "message", "role": "assistant", "content": texts}
            items.append(message if phase is None else {**message, "phase": phase})
            texts = []
        if type(part) is Text:
            phase = peek(kept, "phase", str, None)
            text: dict[str, Any] = {"type": "output_text", "text": part.text}
            annotations = peek(kept, "annotations", list, None)
            if annotations:
                text["annotations"] = copy.deepcopy(annotations)
            texts.append(text)
        elif type(part) is ToolCall:
            items.append(_call_item(part))
        elif type(part) is Thinking and peek(part.provider_data, "type", str, "") == "reasoning":
            items.append(copy.deepcopy(part.provider_data))
        elif type(part) is Opaque and part.format == FORMAT:
            items.append(copy.deepcopy(part.data))


def _call_item(call: ToolCall) -> dict[str, Any]:
    data = call.provider_data if isinstance(call.provider_data, dict) else {}
    kept = copy.deepcopy({k: v for k, v in data.items() if k != STORED})
    item = {"type": "function_call", **kept, "call_id": call.id, "name": call.name}
    return {**item, "arguments": _arguments_text(call, kept.get("arguments"))}


def _arguments_text(call: ToolCall, kept: Any) -> str:
    """The arguments as the model wrote them while still true to `call`, else re-serialized."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    if isinstance(kept, str) and (json_object(kept) if kept.strip() else {}) == call.arguments:
        return kept
    return json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))


# -- output items as parts -------------------------------------------------------------------------


def reasoning(item: dict[str, Any], where: str) -> Thinking:
    field(item, "id", str, where)
    texts = []
    for j, entry in enumerate(field(item, "summary", list, where)):
        at = f"{where}.summary[{j}]"
        texts.append(field(expect(entry, dict, at), "text", str, at))
    return Thinking(SUMMARY_JOIN.join(texts), provider_data=kept(item, where))


def message(item: dict[str, Any], where: str, *, apart: bool = False) -> tuple[list[Part], bool]:
    """The parts of a message item, and whether one of them is a refusal. A text keeps its
    item's `phase` and its own annotations (to send back); a content part of another type is
    kept as a message item of its own, which goes back in its place. The first text is marked
    `APART` when the item follows another message (`apart`) or holds only empty text, so that it
    goes back as an item of its own, not joined to the one before nor left out."""
    parts: list[Part] = []
    refused = False
    phase = optional(item, "phase", str, where, None)
    for j, part in enumerate(field(item, "content", list, where)):
        at = f"{where}.content[{j}]"
        key = TEXT_FIELDS.get(field(expect(part, dict, at), "type", str, at))
        if key is None:
            alone = {"type": "message", "role": "assistant", "content": [part]}
            parts.append(
                Opaque(FORMAT, kept(alone if phase is None else {**alone, "phase": phase}, at))
            )
            continue
        kept_data: dict[str, Any] = {} if phase is None else {"phase": phase}
        if peek(part, "annotations", list, None):
            kept_data["annotations"] = kept(part["annotations"], f"{at}.annotations")
        parts.append(Text(field(part, key, str, at), provider_data=kept_data or None))
        refused = refused or key == "refusal"
    texts = [(i, p) for i, p in enumerate(parts) if type(p) is Text]
    if texts and (apart or not any(p.text for _, p in texts)):
        n, first = texts[0]
        parts[n] = Text(first.text, provider_data={**(first.provider_data or {}), APART: True})
    return parts, refused


def other_item(item: dict[str, Any], kind: str, where: str) -> Opaque:
    """An item this codec does not read, kept to go back as it came; one with a function call's
    `call_id`, `name` and `arguments` under another type is a call whose type was garbled (no
    other item has all three), which kept it would leave unanswered."""
    if {"call_id", "name", "arguments"} <= item.keys():
        raise DecodeError(f"{where}.type", f"{kind!r} has a function call's fields: not a type")
    return Opaque(FORMAT, kept(item, where))


def function_call(item: dict[str, Any], where: str, *, cut: bool) -> ToolCall:
    call_id = tool_call_id(item, "call_id", where)
    name = field(item, "name", str, where)
    text = field(item, "arguments", str, where)
    extra = kept({k: v for k, v in item.items() if k not in _CALL_FIELDS}, where)
    return tool_call(call_id, name, text, cut=cut, provider_data=extra)


def waiting(output: list[dict[str, Any]]) -> str | None:
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


# -- server-side state -----------------------------------------------------------------------------


def stored(
    reply: ModelResponse, messages: Sequence[Message], server: str, model: str
) -> ModelResponse:
    """`reply`, which `server` stored as `model`'s response to `messages`, with its last text or
    call marked so: the next request of this history can name the response instead of resending
    it. A reply without an id, or without a text or call, is left as it is."""
    at = [i for i, p in enumerate(reply.content) if type(p) is Text or type(p) is ToolCall]
    if reply.id is None or not at:
        return reply
    mark = {"id": reply.id, "server": server, "model": model, "messages": len(messages)}
    mark["digest"] = _digest(messages, len(messages))
    part: Any = reply.content[at[-1]]
    data = part.provider_data if isinstance(part.provider_data, dict) else {}
    content = list(reply.content)
    content[at[-1]] = msgspec.structs.replace(part, provider_data={**data, STORED: mark})
    return msgspec.structs.replace(reply, content=content)


def chained(messages: Sequence[Message], server: str, model: str) -> tuple[str, int] | None:
    """The response `server` stored that `messages` continue, and where the messages it has not
    seen begin: the last assistant message's mark, when it is this server's and `model`'s, and
    the messages before it are, in number and digest, those that response answered. Else None:
    the whole history goes (another client, model or format answered last, or the history was
    cut or changed)."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if _is_reply(messages[i])), None)
    if last is None:
        return None
    reply: Any = messages[last]
    mark = next((_mark(p) for p in reversed(reply.content) if _mark(p) is not None), None)
    if mark is None or (mark.get("server"), mark.get("model")) != (server, model):
        return None
    if mark.get("messages") != last:
        return None
    if mark.get("digest") != _digest(messages, last) or not isinstance(mark.get("id"), str):
        return None
    return mark["id"], last + 1


def _is_reply(message: Message) -> bool:
    return type(message) is AssistantMessage


def _mark(part: Part) -> dict[str, Any] | None:
    if type(part) is not Text and type(part) is not ToolCall:
        return None
    return peek(part.provider_data, STORED, dict, None)


def _digest(messages: Sequence[Message], count: int) -> str:
    """A digest of the first `count` messages, as a run dumps them."""
    encoded = msgspec.json.encode(list(itertools.islice(messages, count)))
    return hashlib.blake2b(encoded, digest_size=16).hexdigest()
