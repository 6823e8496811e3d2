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

- `Thinking` parts are dropped: the API has no way to send reasoning back (a dialect's server
  may have one: see Dialects below).
- A reply's texts are one string, unless one of them keeps a content part's fields
  (`provider_data["openai_chat"]`, as a history another client wrote sends them): then the
  content is a list of text parts, one a text. A tool message names the tool it answers only
  with `name_results=True`.
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
definition has a `type` joins `tools` as it is (after the request's own, or at its
`position`), and one without is fields of the body, which may not overwrite a field the
request sets. `allowed_tools` is a `tool_choice` option, sent as given.

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

Dialects. OpenAI-compatible servers differ from OpenAI in small ways; `Client(...,
dialect=...)` (a name in `DIALECTS`, or a `Dialect`) reads and writes as one does: its
reasoning fields (`reasoning_content`, `reasoning`) are a `Thinking` part before the rest
(`ThinkingDelta`s in a stream), sent back in the field and turns the server wants (`sends`,
`tool_turns_only`); a call without an id gets `call_<n>_<reply id>` where it allows
(`made_ids`); arguments sent as a JSON object, fragments without `index` and a body without
`finish_reason` are read; `max_tokens` is written, and no `prompt_cache_key`.
"""

__all__ = [
    "DIALECTS",
    "Client",
    "Dialect",
    "StreamAccumulator",
    "TokenLimitField",
    "decode",
    "encode",
]

import functools as _functools
from typing import Any as _Any

from turnstile.providers._client import Wire as _Wire
from turnstile.providers._client import WireClient as _WireClient

from ._decode import decode
from ._dialect import DIALECTS, Dialect
from ._dialect import dialect_of as _dialect_of
from ._encode import TokenLimitField, encode
from ._encode import limit_field as _limit_field
from ._stream import StreamAccumulator

_OPENAI = _Wire("openai", "/chat/completions", "gpt-5.1", encode, decode, StreamAccumulator)


def _wire_of(dialect: str | Dialect | None) -> _Wire:
    """The format's codec as `dialect` writes and reads it (OpenAI's own for None)."""
    return _OPENAI if dialect is None else _dialect_wire(_dialect_of(dialect))


@_functools.cache
def _dialect_wire(dialect: Dialect) -> _Wire:
    return _OPENAI._replace(
        encode=_functools.partial(encode, dialect=dialect),
        decode=_functools.partial(decode, dialect=dialect),
        accumulator=_functools.partial(StreamAccumulator, dialect),
    )


class Client(_WireClient):
    """This format over `openai.OpenAI()` (`complete`) or `AsyncOpenAI()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, sdk_retries=False,
    token_limit_field="max_completion_tokens", dialect=None, **options)`; see `WireClient`
    (the SDK's own retries are off unless `sdk_retries=True`). `token_limit_field="max_tokens"`
    writes the older field, for OpenAI-compatible servers that refuse the newer one.

    `dialect` names an OpenAI-compatible server's rules (`"vllm"`, `"ollama"`, `"lmstudio"`,
    `"openrouter"`, `"deepseek"`: `DIALECTS`), or is a `Dialect` of your own: reasoning read as
    `Thinking` and sent back as that server wants it, ids made for calls without one, and
    `max_tokens` unless `token_limit_field` says otherwise.
    """

    wire = _OPENAI

    def __init__(
        self,
        sdk: _Any,
        *,
        token_limit_field: TokenLimitField | None = None,
        dialect: str | Dialect | None = None,
        **settings: _Any,
    ) -> None:
        super().__init__(sdk, **settings)
        self.dialect = None if dialect is None else _dialect_of(dialect)
        if self.dialect is not None:
            vars(self)["wire"] = _dialect_wire(self.dialect)  # this dialect's codec
            token_limit_field = token_limit_field or self.dialect.token_limit_field
        field = _limit_field(token_limit_field or "max_completion_tokens")
        if field != "max_completion_tokens":
            self.options["token_limit_field"] = field
