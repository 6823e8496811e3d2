"""Model strings: `"openai:gpt-4.1"` names a wire format and a model; `model_client` builds its
`Client` over the official SDK, configured from the environment as the SDK documents it, and
`ModelRouter` sends each request to the client of the model it names, so a run's fallback
models (`LoopSpec.models`) may be on other providers."""

from __future__ import annotations

__all__ = ["MissingAPIKey", "ModelRouter", "model_client"]

import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import msgspec
from turnstile.core import InvalidSpec, ModelRequest, TurnstileError
from turnstile.core.messages import History, ModelResponse

from ._client import WireClient, takes
from ._deltas import Delta
from ._errors import ProviderError
from ._optional import required
from ._portable import FORMATS, portable


class _Provider(NamedTuple):
    """One prefix of a model string: its codec module, its SDK (also the extra that installs it)
    and the environment variable holding its key; for an OpenAI-compatible server, its default
    base URL and its dialect (a local server's key is optional)."""

    codec: str
    sdk: str
    key: str
    base_url: str | None = None
    dialect: str | None = None
    key_required: bool = True


_ANTHROPIC = _Provider("anthropic_messages", "anthropic", "ANTHROPIC_API_KEY")
_CHAT = _Provider("openai_chat", "openai", "OPENAI_API_KEY")
_RESPONSES = _Provider("openai_responses", "openai", "OPENAI_API_KEY")

_PROVIDERS = {
    "anthropic": _ANTHROPIC,
    "openai": _CHAT,
    "openai-chat": _CHAT,  # as traces name it
    "openai-responses": _RESPONSES,
    "deepseek": _Provider(
        "openai_chat", "openai", "DEEPSEEK_API_KEY", "https://api.deepseek.com", "deepseek"
    ),
    "openrouter": _Provider(
        "openai_chat", "openai", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1", "openrouter"
    ),
    "ollama": _Provider(
        "openai_chat", "openai", "OLLAMA_API_KEY", "http://localhost:11434/v1", "ollama", False
    ),
    "vllm": _Provider(
        "openai_chat", "openai", "VLLM_API_KEY", "http://localhost:8000/v1", "vllm", False
    ),
    "lmstudio": _Provider(
        "openai_chat", "openai", "LMSTUDIO_API_KEY", "http://localhost:1234/v1", "lmstudio", False
    ),
}
"""Every prefix a model string may have: the one table of them (`turnstile run --provider`
takes these too)."""


class MissingAPIKey(TurnstileError):
    """A model string names a provider whose key is not in the environment; `variable` names
    the environment variable to set."""

    def __init__(self, variable: str, used_for: str) -> None:
        self.variable = variable
        super().__init__(f"{variable} is not set: export it to use {used_for}")


def model_client(
    model: str, *, is_async: bool = False, stream: bool = True, **options: Any
) -> WireClient:
    """The `Client` that `model` names, as `"provider:model"`: `"anthropic:claude-sonnet-4-5"`
    (Anthropic Messages), `"openai:gpt-4.1"` (Chat Completions, also `"openai-chat:..."`) or
    `"openai-responses:gpt-4.1"` (Responses); the provider alone (`"anthropic"`) means its
    format's default model. It is built over the SDK's sync client (its async one with
    `is_async=True`), which reads its key and base URL from the environment as it documents
    (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`; `ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL` point it at
    another server, an OpenAI-compatible one say). OpenAI-compatible servers have prefixes of
    their own, each with its `dialect` and default base URL, which `<PREFIX>_BASE_URL` replaces:
    `"deepseek:deepseek-chat"` (`DEEPSEEK_API_KEY`), `"openrouter:openai/gpt-4.1"`
    (`OPENROUTER_API_KEY`), and the local servers `"ollama:qwen3:8b"` (localhost:11434),
    `"vllm:Qwen/Qwen3-8B"` (localhost:8000) and `"lmstudio:qwen/qwen3-8b"` (localhost:1234),
    whose key (`OLLAMA_API_KEY`, `VLLM_API_KEY`, `LMSTUDIO_API_KEY`) is needed only if the
    server was started with one; these name their model always. It streams unless
    `stream=False` (a streamed reply decodes to the same response, and `on_update` sees its
    text as it comes); `options` go to the `Client` (`temperature=`, `on_delta=`, ...). The
    object form,
    `openai_chat.Client(openai.OpenAI(...), model=...)`, takes anything the SDK does.

    Raises `InvalidSpec` for a string that names no known provider, `MissingExtra` when the
    provider's SDK is not installed, and `MissingAPIKey` when its key is not set.
    """
    prefix, _, name = model.partition(":")
    provider = _PROVIDERS.get(prefix)
    if provider is None:
        known = ", ".join(f"{p}:" for p in _PROVIDERS)
        raise InvalidSpec(
            f"{model!r} names no provider: a model string starts with {known}", field="model"
        )
    if provider.dialect is not None and not name:
        raise InvalidSpec(f"{model!r} names no model: {prefix}:<model>", field="model")
    sdk: Any = required(provider.sdk, provider.sdk, needed_by=f"the model {model}")
    key = os.environ.get(provider.key)
    if not key and provider.key_required:
        raise MissingAPIKey(provider.key, f"the model {model}")
    codec: Any = importlib.import_module(f"turnstile.providers.{provider.codec}")
    if provider.sdk == "anthropic":
        client = sdk.AsyncAnthropic() if is_async else sdk.Anthropic()
    elif provider.dialect is not None:
        base_url = os.environ.get(f"{prefix.upper()}_BASE_URL") or provider.base_url
        cls = sdk.AsyncOpenAI if is_async else sdk.OpenAI
        client = cls(api_key=key or "unused", base_url=base_url)  # a local server needs none
        options = {"dialect": provider.dialect, **options}
    else:
        client = sdk.AsyncOpenAI() if is_async else sdk.OpenAI()
    built: WireClient = codec.Client(client, model=name or None, stream=stream, **options)
    return built


class ModelRouter:
    """A model client over several: each request goes to the client of the model it names
    (`ModelRequest.model`, from `LoopSpec.models`), asking for the model after its provider
    prefix (`"anthropic:claude-sonnet-4-5"` asks for `claude-sonnet-4-5`), or for the
    client's own when the name has no known prefix; a request naming no model, or one not in
    `clients`, goes to `default` as it is. A history goes to a codec's `Client` carried over
    by `portable` to its format (another format's blocks left out, as written there), since a
    fallback may bring it from another provider.

        router = ModelRouter({"deepseek:deepseek-reasoner": chat, "anthropic:claude-sonnet-4-5":
                              claude})

    `for_models` builds one from model strings; the executors do that for a spec whose
    `models` are model strings. Calling it for a model it has no client for raises a final
    `ProviderError` (kind `unknown_model`).
    """

    def __init__(self, clients: Mapping[str, Any], default: Any = None) -> None:
        self.clients = dict(clients)
        self.default = default
        self._seen: dict[str, History] = {}  # per format, a history that needed no carrying
        every = [*self.clients.values(), *([] if default is None else [default])]
        self.is_async = any(getattr(c, "is_async", False) for c in every)

    @classmethod
    def for_models(cls, models: Iterable[str], default: Any, *, is_async: bool) -> Any:
        """`default`, or a router in front of it when some of `models` are model strings, each
        of which gets its client (`model_client`, from the environment)."""
        named = cls.model_strings(models)
        if not named or isinstance(default, ModelRouter):
            return default
        return cls({m: model_client(m, is_async=is_async) for m in named}, default)

    @staticmethod
    def model_strings(models: Iterable[str]) -> list[str]:
        """Those of `models` that are model strings: a known provider's prefix, then a colon."""
        return [m for m in models if m.partition(":")[0] in _PROVIDERS and ":" in m]

    def __repr__(self) -> str:
        return f"<ModelRouter {list(self.clients)}>"

    def _route(self, request: ModelRequest) -> tuple[Any, ModelRequest]:
        client = self.clients.get(request.model) if request.model is not None else None
        if client is None:
            if self.default is None:
                raise ProviderError(
                    "unknown_model", f"no client for the model {request.model!r}", retryable=False
                )
            return self.default, self._carried(request, self.default)
        prefix, _, name = request.model.partition(":")  # type: ignore[union-attr]
        asked = name or None if prefix in _PROVIDERS else None
        return client, self._carried(msgspec.structs.replace(request, model=asked), client)

    def _carried(self, request: ModelRequest, client: Any) -> ModelRequest:
        """`request` with its history `portable` to the format of `client` (a codec's
        `Client`), which it may have come to from another's: the same request when nothing had
        to change. A run's histories only grow, so only messages not yet seen are looked at."""
        format = _format_of(client)
        if format is None:
            return request
        messages, start = request.messages, 0
        seen = self._seen.get(format)
        if isinstance(messages, History) and seen is not None and messages.extends(seen):
            start = len(seen)
        fresh = messages[start:]
        if all(a is b for a, b in zip(portable(fresh, format), fresh, strict=True)):
            if isinstance(messages, History):
                self._seen[format] = messages
            return request
        return msgspec.structs.replace(request, messages=portable(messages, format))

    def complete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        """The reply of the client `request.model` names (see the class)."""
        client, request = self._route(request)
        reply: ModelResponse = client.complete(request, **_streamed(client.complete, on_delta))
        return reply

    async def acomplete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        """`complete`, awaiting a client that is async."""
        client, request = self._route(request)
        if not hasattr(client, "acomplete"):
            said: ModelResponse = client.complete(request, **_streamed(client.complete, on_delta))
            return said
        reply: ModelResponse = await client.acomplete(
            request, **_streamed(client.acomplete, on_delta)
        )
        return reply


def _format_of(client: Any) -> str | None:
    """The wire format of a codec's `Client` (its class's or a base's module), else None."""
    for cls in type(client).__mro__:
        if (name := cls.__module__.rpartition(".")[2]) in FORMATS:
            return name
    return None


def _streamed(method: Callable[..., Any], on_delta: Any) -> dict[str, Any]:
    """`on_delta` for a client method written to take it (`takes`, the executors' rule too)."""
    return {} if on_delta is None or not takes(method, "on_delta") else {"on_delta": on_delta}
