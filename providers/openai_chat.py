"""The OpenAI Chat Completions wire format (`POST /v1/chat/completions`), pure and without I/O.

`encode` turns a neutral `ModelRequest` into the request body, `decode` reads a response body,
and `StreamAccumulator` folds streamed chunks into the very `ModelResponse` that `decode` gives
for the same reply.

Sending. A user message of parts is a list of content parts: `Text` is `text`, `Image` is
`image_url` (its URL or a `data:` URL of its bytes, and its `detail`), `Document` is `file`
(`file_data` as a data URL, named by its name or else its title; or its `file_id`), `Audio` is
`input_audio` (wav or mp3, from the media type), and an `Opaque` of this format goes as the part
it is. `Instructions` are a `system` or `developer` message where they stand. What Chat cannot
carry raises `UnsupportedContent` naming it: an image by file_id, a document by URL, audio of
another type, another format's `Opaque`, and an image or document in a tool result (a tool
message holds text parts only; putting the media in a user message of our own making would
change what the conversation says). What has no word in Chat:

- `Thinking` parts are dropped: the API has no way to send reasoning back.
- A prefill (a request ending with an assistant message) goes as it is, though OpenAI answers
  after it rather than going on from it (some compatible servers go on from it, given a flag
  of their own); the codec cannot tell it from a history that merely ends there.
- A document's `title` is sent only as the file name of a document without a `name`.
- `ToolResult.is_error` has no field: the content goes as is, since the loop's and the tools'
  error contents already say what went wrong ("get_weather failed: ...", "not run: ...").
- Tool arguments are re-encoded from the dict as compact JSON, keys in the model's order and
  non-ASCII unescaped; so the string is byte-equal to the model's own only when the model wrote
  it that way (`{"city":"北京"}`, not `{"city": "北京"}`). `raw_arguments` (JSON that was invalid
  or cut off) go back verbatim.
- `max_tokens` becomes `max_completion_tokens` (reasoning models refuse the deprecated
  `max_tokens`), or `max_tokens` with `token_limit_field="max_tokens"`, for the OpenAI-compatible
  servers that know only that one.

The request's options: caching sends `prompt_cache_key` (the policy's key, else the loop's; a
`ttl` has no counterpart: `prompt_cache_retention` is an option of its own). `ToolSpec.strict` is
`function.strict` (None: left out). `tool_choice` "required", "none" and `UseTool` are written;
"auto", the API's default, is not, nor "none" without tools (the API refuses a tool_choice
without tools). `output` is a `json_schema` `response_format`. Chat has no hosted tools, only
options such as a search model's `web_search_options`: so a server tool of this format whose
definition has a `type` joins `tools` as it is, and one without is fields of the body, which
may not overwrite a field the request sets.

Reading replies: only the first choice counts. A `refusal` makes the stop `refusal` whatever the
finish_reason; "stop" with tool calls (a named `tool_choice`) is `tool_use`. A stream that ends
without a finish_reason (some gateways send none) is judged by its content: whole calls are
`tool_use`, text alone `end_turn`, a call cut short or nothing at all `incomplete_stream`,
retryable (a body must carry its finish_reason, as every format's its stop). Blank arguments
mean no arguments, unless `length` cut the last call, which then is `complete=False` with the
members salvaged that were provably whole. Ids are never invented: a call without one, or a
legacy `function_call` (which has none), is a `DecodeError`; so is a call of any type but
`function` (`"functoin"`), which the loop could not answer. Nothing else in a message is lost:
its `annotations` (a search model's citations) ride in the text's `provider_data` (an assistant
message has no field to send them back in); fields the codec does not know
(`reasoning_content`, `audio`, ...) are kept in one `Opaque` ending the reply, whose data go
back as fields of the assistant message; a call's own unknown fields (Gemini's
`extra_content`) ride in its `provider_data["openai_chat"]` and go back in the call. A stream
gathers them as `decode` reads them whole: strings join, arrays extend, other values are the
last one sent.
"""

from __future__ import annotations

__all__ = ["Client", "StreamAccumulator", "TokenLimitField", "decode", "encode"]

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Audio,
    Document,
    Image,
    Instructions,
    Message,
    ModelResponse,
    ModelStop,
    Opaque,
    Part,
    ResultPart,
    Text,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
    UserPart,
)
from turnstile.core.request import OutputFormat, ToolChoice

from ._cache import WireCache, folded
from ._client import Wire, WireClient
from ._deltas import ArgumentsDelta, Delta, TextDelta
from ._errors import DecodeError, ProviderError, UnsupportedContent
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

FORMAT = "openai_chat"
TokenLimitField = Literal["max_completion_tokens", "max_tokens"]
"""The body field that carries `ModelRequest.max_tokens`."""

_encoder = msgspec.json.Encoder()

_STOPS = {
    "stop": ModelStop.end_turn,
    "tool_calls": ModelStop.tool_use,
    "function_call": ModelStop.tool_use,
    "length": ModelStop.max_tokens,
    "content_filter": ModelStop.content_filter,
}
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
# What the codec reads of a message (or a stream's delta) and of a tool call; the rest is kept.
_MESSAGE_FIELDS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "annotations"}
)
_CALL_FIELDS = frozenset({"index", "id", "type", "function"})
_WireCall = tuple[str, str, str, dict[str, Any]]  # id, name, arguments text, unknown fields
_EMPTY: tuple[Any, ...] = (None, "", [], {})


# -- encoding --------------------------------------------------------------------------------------


def encode(
    request: ModelRequest,
    *,
    model: str,
    cache: WireCache | None = None,
    token_limit_field: TokenLimitField = "max_completion_tokens",
    **options: Any,
) -> dict[str, Any]:
    """The JSON body for `POST /v1/chat/completions`.

    `token_limit_field` names the field of `request.max_tokens`. `options` are merged over the
    body (`temperature=0`, `response_format=...`); `stream=True` also asks for the final usage
    chunk (`stream_options.include_usage`), which explicit `stream_options` may override.

    With a `cache`, later calls on the same `History` encode only its new messages and reuse the
    entries of `messages` (the body and the list itself are new on every call): treat them as
    read-only, and copy one before changing it.

    Raises `UnsupportedContent` for a part Chat cannot carry, and `ValueError` for another
    `token_limit_field` or a server tool's field that the request already sets.
    """
    head = [{"role": "system", "content": request.system}] if request.system is not None else None
    messages = folded(_fold, request.messages, cache, head)
    body: dict[str, Any] = {"model": model, "messages": messages}
    ours = [s.definition for s in request.server_tools if s.format == FORMAT]
    tools = [_tool(t) for t in request.tools] + [d for d in ours if "type" in d]
    if tools:
        body["tools"] = tools
    if request.tool_choice != "auto" and (tools or request.tool_choice != "none"):
        body["tool_choice"] = _tool_choice(request.tool_choice)
    body[_limit_field(token_limit_field)] = request.max_tokens
    if request.output is not None:
        body["response_format"] = _response_format(request.output)
    policy = request.cache
    if policy is not None and policy.enabled and (key := policy.key or request.cache_key):
        body["prompt_cache_key"] = key
    for definition in ours:
        if "type" not in definition:
            _set_fields(body, definition)
    body.update(options)
    if options.get("stream") is True:
        body["stream_options"] = {"include_usage": True, **(options.get("stream_options") or {})}
    return body


def _limit_field(name: str) -> str:
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


def _fold(wire: list[dict[str, Any]], history: Iterable[Message]) -> None:
    for message in history:
        match message:
            case UserMessage(content=content):
                wire.append({"role": "user", "content": _content(content, _user_part)})
            case AssistantMessage():
                wire.append(_assistant(message))
            case Instructions(text=text, role=role):
                wire.append({"role": role, "content": text})
            case ToolResults(results=results):
                wire.extend(
                    {
                        "role": "tool",
                        "tool_call_id": r.call_id,
                        "content": _content(r.content, _result_part),
                    }
                    for r in results
                )


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


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    """A reply as one assistant message: its texts joined, its calls, and the fields an
    `Opaque` of this format kept."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    for part in message.content:
        if type(part) is Text:
            texts.append(part.text)
        elif type(part) is ToolCall:
            calls.append(_call(part))
        elif type(part) is Opaque:
            fields.update(_opaque(part))
    out: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
    }
    if calls:
        out["tool_calls"] = calls
    out.update(fields)
    return out


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


# -- decoding --------------------------------------------------------------------------------------


def decode(body: Mapping[str, Any]) -> ModelResponse:
    """The reply in a `chat.completion` body (its first choice).

    Raises `ProviderError` for an error body and `DecodeError` naming the path of anything the
    reply cannot be read without (`choices[0].message`, `...tool_calls[1].id`).
    """
    _raise_error(expect(body, dict, ""))
    choices = field(body, "choices", list, "")
    if not choices:
        raise DecodeError("choices", "empty")
    choice = expect(choices[0], dict, "choices[0]")
    where = "choices[0].message"
    message = field(choice, "message", dict, "choices[0]")
    _no_function_call(message, where)
    tool_calls = optional(message, "tool_calls", list, where, [])
    calls = [_wire_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(tool_calls)]
    return _response(
        optional(message, "content", str, where, ""),
        optional(message, "refusal", str, where, ""),
        calls,
        field(choice, "finish_reason", str, "choices[0]"),
        _usage(body),
        kept(optional(message, "annotations", list, where, []), f"{where}.annotations"),
        _unknown(message, _MESSAGE_FIELDS, where),
        body,
    )


def _raise_error(body: Mapping[str, Any]) -> None:
    error = body.get("error")
    if error is not None:
        raise error_failure(error, unexplained=False)


def _no_function_call(message: Mapping[str, Any], where: str) -> None:
    if message.get("function_call") is not None:
        raise DecodeError(f"{where}.function_call", "a legacy function_call carries no call id")


def _wire_call(call: Any, where: str) -> _WireCall:
    """(id, name, arguments text, unknown fields) of one `tool_calls` entry."""
    _function_type(expect(call, dict, where), where)
    call_id = tool_call_id(call, "id", where)
    function = field(call, "function", dict, where)
    at = f"{where}.function"
    arguments = optional(function, "arguments", str, at, "")
    return call_id, _name(function, at), arguments, _unknown(call, _CALL_FIELDS, where)


def _unknown(obj: Mapping[str, Any], known: frozenset[str], where: str) -> dict[str, Any]:
    """The fields of `obj` the codec does not read, kept (`kept`); empty values (null, "", [],
    {}: OpenRouter's `"reasoning_details": []`) say nothing."""
    return {
        heal(key): kept(value, f"{where}.{key}")
        for key, value in obj.items()
        if key not in known and value not in _EMPTY
    }


def _function_type(call: Mapping[str, Any], where: str) -> None:
    kind = optional(call, "type", str, where, "") or "function"
    if kind != "function":
        raise DecodeError(f"{where}.type", f"unsupported tool call type {kind!r}")


def _name(function: Mapping[str, Any], where: str) -> str:
    name = field(function, "name", str, where)
    if not name:
        raise DecodeError(f"{where}.name", "empty")
    return heal(name)


def _usage(body: Mapping[str, Any]) -> Usage:
    """The usage in `body`, none when it has none (a stream's chunks but the last)."""
    usage = optional(body, "usage", dict, "", {})
    prompt = optional(usage, "prompt_tokens_details", dict, "usage", {})
    completion = optional(usage, "completion_tokens_details", dict, "usage", {})
    at_prompt, at_completion = "usage.prompt_tokens_details", "usage.completion_tokens_details"
    return Usage(
        input_tokens=count(usage, "prompt_tokens", "usage", 0),
        output_tokens=count(usage, "completion_tokens", "usage", 0),
        cache_read_tokens=count(prompt, "cached_tokens", at_prompt, 0),
        cache_write_tokens=count(prompt, "cache_write_tokens", at_prompt, 0),
        reasoning_tokens=count(completion, "reasoning_tokens", at_completion, 0),
    )


def _response(
    text: str,
    refusal: str,
    calls: list[_WireCall],
    finish: str,
    usage: Usage,
    annotations: list[Any],
    unknown: dict[str, Any],
    named: Mapping[str, Any],
) -> ModelResponse:
    """The neutral reply; shared by `decode` and `StreamAccumulator` so both agree exactly.
    `annotations` go with the text (without text, with the unknown fields)."""
    parts: list[Part] = []
    if text:
        parts.append(Text(text, {"annotations": annotations} if annotations else None))
    elif annotations:
        unknown = {"annotations": annotations, **unknown}
    if refusal:
        parts.append(Text(refusal))
    last = len(calls) - 1 if finish == "length" else -1  # a closed object was not cut, though
    parts += [
        tool_call(
            call_id,
            name,
            arguments,
            cut=n == last and json_object(arguments) is None,
            provider_data={FORMAT: own} if own else None,
        )
        for n, (call_id, name, arguments, own) in enumerate(calls)
    ]
    raw_stop = None
    if refusal:
        stop = ModelStop.refusal
    elif finish == "stop" and calls:
        stop = ModelStop.tool_use  # a named `tool_choice` ends with "stop"
    elif finish in _STOPS:
        stop = _STOPS[finish]
    else:
        stop, raw_stop = ModelStop.other, finish
    response = reply(parts, stop, usage, raw_stop, named)
    if not unknown:
        return response
    return msgspec.structs.replace(response, content=[*response.content, Opaque(FORMAT, unknown)])


# -- streaming -------------------------------------------------------------------------------------


class _Unknown:
    """The unknown fields of a message or call, gathered over a stream's chunks into what
    `decode` reads from the whole: strings join, arrays extend, other values are the last one."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def add(self, obj: Mapping[str, Any], known: frozenset[str], where: str) -> None:
        for key, value in obj.items():
            if key in known or value in _EMPTY:
                continue
            name, old = heal(key), self._values.get(heal(key))
            if type(value) is str:
                pieces = old if type(old) is Pieces else Pieces()
                pieces.add(value)
                self._values[name] = pieces
            elif type(value) is list and type(old) is list:
                old += kept(value, f"{where}.{key}")
            else:
                self._values[name] = kept(value, f"{where}.{key}")

    def result(self) -> dict[str, Any]:
        return {k: v.text() if type(v) is Pieces else v for k, v in self._values.items()}


class _Call:
    __slots__ = ("arguments", "id", "name", "unknown")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments = Pieces()
        self.unknown = _Unknown()


class StreamAccumulator:
    """Folds the chunks of a streamed completion into one `ModelResponse`.

    `feed` takes each parsed `data:` chunk (not `[DONE]`) and returns the deltas it adds; tool
    call fragments are routed by their `index`, since only the first carries the id and name
    (calls count from 0 in order: an index past the next call is a `DecodeError`).
    `result()` equals what `decode` gives for the same reply sent whole. A chunk holding an
    `error` raises `ProviderError`. `result()` is the end of the stream: one that ended without
    a `finish_reason` (some gateways, OpenRouter among them, send none for some models) is
    judged by its content, with or without `data: [DONE]`: `tool_calls` when it holds calls,
    each whole JSON (or blank), `stop` when it holds text alone; with a call cut short, or
    nothing said at all, it is `ProviderError("incomplete_stream")`, retryable.
    """

    __slots__ = (
        "_annotations",
        "_calls",
        "_finish",
        "_named",
        "_refusal",
        "_text",
        "_unknown",
        "_usage",
    )

    def __init__(self) -> None:
        self._text = Pieces()
        self._refusal = Pieces()
        self._annotations: list[Any] = []
        self._unknown = _Unknown()
        self._calls: list[_Call] = []
        self._finish: str | None = None
        self._usage = Usage()
        self._named: dict[str, Any] = {}  # the completion's id and model, as a chunk says

    def feed(self, chunk: Mapping[str, Any]) -> list[Delta]:
        """Take one chunk; returns the text and argument deltas it carried, in order."""
        _raise_error(expect(chunk, dict, ""))
        choices = field(chunk, "choices", list, "")
        for key in ("id", "model"):
            if chunk.get(key):
                self._named.setdefault(key, chunk[key])
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk)
        deltas: list[Delta] = []
        for n, choice in enumerate(choices):
            if expect(choice, dict, f"choices[{n}]").get("index", 0) == 0:
                deltas += self._choice(choice, f"choices[{n}]")
        return deltas

    def result(self) -> ModelResponse:
        """The whole reply; raises `ProviderError` (`incomplete_stream`) if it never finished."""
        calls = [(c.id, c.name, c.arguments.text(), c.unknown.result()) for c in self._calls]
        finish = self._finish
        if finish is None and (calls or self._text or self._refusal):
            whole = all(
                json_object(text) is not None or not text.strip() for _, _, text, _ in calls
            )
            finish = ("tool_calls" if calls else "stop") if whole else None
        if finish is None:
            raise ProviderError(
                "incomplete_stream", "the stream ended before a finish_reason", retryable=True
            )
        return _response(
            self._text.text(),
            self._refusal.text(),
            calls,
            finish,
            self._usage,
            self._annotations,
            self._unknown.result(),
            self._named,
        )

    def _choice(self, choice: Mapping[str, Any], at: str) -> list[Delta]:
        deltas: list[Delta] = []
        delta = optional(choice, "delta", dict, at, {})  # Azure's content-filter chunks have none
        where = f"{at}.delta"
        _no_function_call(delta, where)
        if text := self._text.add(optional(delta, "content", str, where, "")):
            deltas.append(TextDelta(0, text))
        if text := self._refusal.add(optional(delta, "refusal", str, where, "")):
            deltas.append(TextDelta(int(bool(self._text)), text))
        self._annotations += kept(
            optional(delta, "annotations", list, where, []), f"{where}.annotations"
        )
        self._unknown.add(delta, _MESSAGE_FIELDS, where)
        fragments = optional(delta, "tool_calls", list, where, [])
        for k, fragment in enumerate(fragments):
            deltas += self._fragment(fragment, f"{where}.tool_calls[{k}]")
        self._finish = optional(choice, "finish_reason", str, at, self._finish)
        return deltas

    def _fragment(self, fragment: Any, where: str) -> list[Delta]:
        """A piece of the call at `index`: calls are numbered from 0 in order, so a fragment
        names one already begun or the next."""
        at = index(expect(fragment, dict, where), "index", where, len(self._calls))
        _function_type(fragment, where)
        function = optional(fragment, "function", dict, where, {})
        if at == len(self._calls):
            call_id = tool_call_id(fragment, "id", where)
            call = _Call(call_id, _name(function, f"{where}.function"))
            self._calls.append(call)
        else:
            call = self._calls[at]
            call_id = optional(fragment, "id", str, where, "")
            if call_id and call_id != call.id:
                raise DecodeError(f"{where}.id", f"index {at} already holds call {call.id!r}")
        call.unknown.add(fragment, _CALL_FIELDS, where)
        text = call.arguments.add(optional(function, "arguments", str, f"{where}.function", ""))
        if not text:
            return []
        part = int(bool(self._text)) + int(bool(self._refusal)) + at
        return [ArgumentsDelta(part, call.id, call.name, text)]


# -- the client ------------------------------------------------------------------------------------


class Client(WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, sdk_retries=False,
    token_limit_field="max_completion_tokens", **options)`; see `WireClient` (the SDK's own
    retries are off unless `sdk_retries=True`). `token_limit_field="max_tokens"` writes the
    older field, for OpenAI-compatible servers that refuse the newer one."""

    wire = Wire("openai", "/chat/completions", "gpt-5.1", encode, decode, StreamAccumulator)

    def __init__(
        self,
        sdk: Any,
        *,
        token_limit_field: TokenLimitField = "max_completion_tokens",
        **settings: Any,
    ) -> None:
        super().__init__(sdk, **settings)
        if _limit_field(token_limit_field) != "max_completion_tokens":
            self.options["token_limit_field"] = token_limit_field
