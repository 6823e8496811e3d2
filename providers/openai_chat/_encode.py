"""Chat Completions requests: a neutral `ModelRequest` as the JSON body to post."""

from __future__ import annotations

__all__ = ["FORMAT", "TokenLimitField", "encode", "limit_field"]

import base64
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Message,
    Opaque,
    ResultPart,
    Text,
    ToolCall,
    ToolResults,
    UserMessage,
    UserPart,
)
from turnstile.core.request import OutputFormat, ToolChoice
from turnstile.providers._cache import WireCache, folded
from turnstile.providers._errors import UnsupportedContent
from turnstile.providers._server_tools import placed
from turnstile.providers._wire import (
    peek,
)

from ._dialect import FORMAT, Dialect, TokenLimitField, sent_reasoning

_encoder = msgspec.json.Encoder()

_LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/wave": "wav",
    "audio/x-wav": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}
_IN_RESULTS = {Image: "an image", Document: "a document"}


def encode(
    request: ModelRequest,
    *,
    model: str,
    cache: WireCache | None = None,
    token_limit_field: TokenLimitField = "max_completion_tokens",
    dialect: Dialect | None = None,
    name_results: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """The JSON body for `POST /v1/chat/completions`.

    `token_limit_field` names the field of `request.max_tokens`. A `dialect` (an
    OpenAI-compatible server's) sends reasoning back as it says, and no `prompt_cache_key`,
    which is OpenAI's alone. `name_results=True` gives each tool message the `name` of the call
    it answers, as some clients send it and some servers want it. `options` are merged over the
    body (`temperature=0`, `response_format=...`); `stream=True` also asks for the final usage
    chunk (`stream_options.include_usage`), which explicit `stream_options` may override.

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    entries of `messages` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.

    Raises `UnsupportedContent` for a part Chat cannot carry, and `ValueError` for another
    `token_limit_field` or a server tool's field that the request already sets.
    """
    head = [{"role": "system", "content": request.system}] if request.system is not None else None
    messages = folded(_fold_for(dialect, name_results), request.messages, cache, head)
    body: dict[str, Any] = {"model": model, "messages": messages}
    ours = [s.definition for s in request.server_tools if s.format == FORMAT]
    typed = [s for s in request.server_tools if "type" in s.definition]
    if tools := placed([_tool(t) for t in request.tools], typed, FORMAT):
        body["tools"] = tools
    if request.tool_choice != "auto" and (tools or request.tool_choice != "none"):
        body["tool_choice"] = _tool_choice(request.tool_choice)
    body[limit_field(token_limit_field)] = request.max_tokens
    if request.output is not None:
        body["response_format"] = _response_format(request.output)
    policy = request.cache if dialect is None else None
    if policy is not None and policy.enabled and (key := policy.key or request.cache_key):
        body["prompt_cache_key"] = key
    for definition in ours:
        if "type" not in definition:
            _set_fields(body, definition)
    body.update(options)
    if options.get("stream") is True:
        body["stream_options"] = {"include_usage": True, **(options.get("stream_options") or {})}
    return body


def limit_field(name: str) -> str:
    if name not in _LIMIT_FIELDS:
        raise ValueError(f"token_limit_field must be one of {_LIMIT_FIELDS}, not {name!r}")
    return name


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    }
    if spec.strict is not None:
        function["strict"] = spec.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: ToolChoice) -> Any:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


def _response_format(output: OutputFormat) -> dict[str, Any]:
    schema = {"name": output.name, "schema": output.schema, "strict": output.strict}
    return {"type": "json_schema", "json_schema": schema}


def _set_fields(body: dict[str, Any], definition: Mapping[str, Any]) -> None:
    """A server tool given as fields of the body (`web_search_options`), which add, never
    replace."""
    for key, value in definition.items():
        if key in body:
            raise ValueError(f"a server tool of {FORMAT} sets {key!r}, which the request sets")
        body[key] = value


@functools.cache
def _fold_for(
    dialect: Dialect | None, names: bool = False
) -> Callable[[list[dict[str, Any]], Iterable[Message]], None]:
    """The fold of `dialect`'s messages: one object per dialect (and naming), which a
    `WireCache` knows."""
    if dialect is None and not names:
        return _fold
    return functools.partial(_fold, dialect=dialect, names=names)


def _fold(
    wire: list[dict[str, Any]],
    history: Iterable[Message],
    dialect: Dialect | None = None,
    names: bool = False,
) -> None:
    for message in history:
        match message:
            case UserMessage(content=content):
                wire.append({"role": "user", "content": _content(content, _user_part)})
            case AssistantMessage():
                wire.append(_assistant(message, sent_reasoning(dialect, wire, message.content)))
            case Instructions(text=text, role=role):
                wire.append({"role": role, "content": text})
            case ToolResults(results=results):
                called = _names(wire) if names else {}
                for r in results:
                    content = _content(r.content, _result_part)
                    tool = {"role": "tool", "tool_call_id": r.call_id, "content": content}
                    wire.append(
                        {**tool, "name": called[r.call_id]} if r.call_id in called else tool
                    )


def _names(wire: list[dict[str, Any]]) -> dict[str, str]:
    """The names of the calls of the last assistant message written, by call id."""
    last: dict[str, Any] = next((m for m in reversed(wire) if m.get("role") == "assistant"), {})
    return {c["id"]: c["function"]["name"] for c in last.get("tool_calls") or ()}


def _content(content: str | Sequence[Any], part: Callable[[Any], dict[str, Any]]) -> Any:
    """Text stays a string; parts are a list of content parts, each as `part` writes it."""
    return content if isinstance(content, str) else [part(p) for p in content]


def _user_part(part: UserPart) -> dict[str, Any]:
    match part:
        case Text(text=text):
            return {"type": "text", "text": text}
        case Image():
            return _image(part)
        case Document():
            return _file(part)
        case Audio(data=data, media_type=media_type):
            audio_format = _AUDIO_FORMATS.get(media_type.lower())
            if audio_format is None:
                raise UnsupportedContent(FORMAT, f"audio of type {media_type}")
            return {
                "type": "input_audio",
                "input_audio": {"data": _b64(data), "format": audio_format},
            }
    return _opaque(part)


def _result_part(part: ResultPart) -> dict[str, Any]:
    """A part of a tool result: a tool message holds text parts only."""
    if type(part) is Text:
        return {"type": "text", "text": part.text}
    if type(part) is Opaque:
        return _opaque(part)
    raise UnsupportedContent(FORMAT, f"{_IN_RESULTS[type(part)]} in a tool result")


def _opaque(part: Opaque) -> dict[str, Any]:
    """An `Opaque` of this format, as it came; another format's has no place here."""
    if part.format != FORMAT:
        raise UnsupportedContent(FORMAT, f"a part of {part.format}")
    return part.data


def _image(part: Image) -> dict[str, Any]:
    if part.file_id is not None:
        raise UnsupportedContent(FORMAT, "an image by file_id")
    image = {"url": part.url if part.url is not None else _data_url(part)}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def _file(part: Document) -> dict[str, Any]:
    if part.url is not None:
        raise UnsupportedContent(FORMAT, "a document by url")
    if part.file_id is not None:
        return {"type": "file", "file": {"file_id": part.file_id}}
    file = {"file_data": _data_url(part)}
    if name := part.name or part.title:  # OpenAI wants a file name with file_data
        file["filename"] = name
    return {"type": "file", "file": file}


def _data_url(part: Image | Document) -> str:
    """The part's inline data (its one source, which comes with a media type) as a data URL."""
    return f"data:{part.media_type};base64,{_b64(part.data or b'')}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _assistant(message: AssistantMessage, reasoning: dict[str, str]) -> dict[str, Any]:
    """A reply as one assistant message: its texts joined, the reasoning a dialect sends back,
    its calls, and the fields an `Opaque` of this format kept."""
    texts: list[Text] = []
    calls: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    for part in message.content:
        if type(part) is Text:
            texts.append(part)
        elif type(part) is ToolCall:
            calls.append(_call(part))
        elif type(part) is Opaque:
            fields.update(_opaque(part))
    out: dict[str, Any] = {"role": "assistant", "content": _text(texts, calls), **reasoning}
    if calls:
        out["tool_calls"] = calls
    out.update(fields)
    return out


def _text(texts: list[Text], calls: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A reply's texts joined, or as a list of text parts when one of them was sent as a part
    (it keeps its part's fields, `provider_data["openai_chat"]`); None for calls alone."""
    parts = [peek(t.provider_data, FORMAT, dict, None) for t in texts]
    if any(p is not None for p in parts):
        return [
            {"type": "text", **(p or {}), "text": t.text} for t, p in zip(texts, parts, strict=True)
        ]
    return "".join(t.text for t in texts) if texts or not calls else None


def _call(call: ToolCall) -> dict[str, Any]:
    arguments = (
        call.raw_arguments
        if call.raw_arguments is not None
        else _encoder.encode(call.arguments).decode()
    )
    return {
        **peek(call.provider_data, FORMAT, dict, {}),
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
