"""Model strings: `"openai:gpt-4.1"` names a wire format and a model; `model_client` builds its
`Client` over the official SDK, configured from the environment as the SDK documents it."""

from __future__ import annotations

__all__ = ["MissingAPIKey", "model_client"]

import importlib
import os
from typing import Any, NamedTuple

from turnstile.core import InvalidSpec, TurnstileError

from ._client import WireClient
from ._optional import required


class _Provider(NamedTuple):
    """One prefix of a model string: its codec module, its SDK (also the extra that installs it)
    and the environment variable holding its key."""

    codec: str
    sdk: str
    key: str


_ANTHROPIC = _Provider("anthropic_messages", "anthropic", "ANTHROPIC_API_KEY")
_CHAT = _Provider("openai_chat", "openai", "OPENAI_API_KEY")
_RESPONSES = _Provider("openai_responses", "openai", "OPENAI_API_KEY")

_PROVIDERS = {
    "anthropic": _ANTHROPIC,
    "openai": _CHAT,
    "openai-chat": _CHAT,  # as traces name it
    "openai-responses": _RESPONSES,
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
    another server, an OpenAI-compatible one say). It streams unless `stream=False` (a streamed
    reply decodes to the same response, and `on_update` sees its text as it comes); `options`
    go to the `Client` (`temperature=`, `on_delta=`, ...). The object form,
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
    sdk: Any = required(provider.sdk, provider.sdk, needed_by=f"the model {model}")
    if not os.environ.get(provider.key):
        raise MissingAPIKey(provider.key, f"the model {model}")
    codec: Any = importlib.import_module(f"turnstile.providers.{provider.codec}")
    if provider.sdk == "anthropic":
        client = sdk.AsyncAnthropic() if is_async else sdk.Anthropic()
    else:
        client = sdk.AsyncOpenAI() if is_async else sdk.OpenAI()
    built: WireClient = codec.Client(client, model=name or None, stream=stream, **options)
    return built
