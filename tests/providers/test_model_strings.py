"""Model strings: `"provider:model"` builds that format's `Client` over the official SDK, from
the environment, and says in one line what is missing when it cannot."""

from __future__ import annotations

import sys
from typing import Any

import anthropic
import openai
import pytest
from turnstile.core import InvalidSpec, ModelRequest, TurnstileError
from turnstile.core.messages import (
    AssistantMessage,
    History,
    ModelResponse,
    ModelStop,
    Opaque,
    Text,
    UserMessage,
)
from turnstile.providers import (
    MissingAPIKey,
    MissingExtra,
    ModelRouter,
    ProviderError,
    anthropic_messages,
    model_client,
    openai_chat,
    openai_responses,
)

SERVERS = ("DEEPSEEK", "OPENROUTER", "OLLAMA", "VLLM", "LMSTUDIO")
KEYS = (
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    *(f"{s}_{v}" for s in SERVERS for v in ("API_KEY", "BASE_URL")),
)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")


@pytest.mark.parametrize(
    ("model", "codec", "sdk", "name"),
    [
        (
            "anthropic:claude-sonnet-4-5",
            anthropic_messages,
            anthropic.Anthropic,
            "claude-sonnet-4-5",
        ),
        ("openai:gpt-4.1", openai_chat, openai.OpenAI, "gpt-4.1"),
        ("openai-chat:gpt-4.1", openai_chat, openai.OpenAI, "gpt-4.1"),
        ("openai-responses:gpt-4.1", openai_responses, openai.OpenAI, "gpt-4.1"),
        ("anthropic", anthropic_messages, anthropic.Anthropic, "claude-sonnet-4-6"),
    ],
)
def test_a_model_string_builds_its_format_s_client_over_the_sdk(
    model: str, codec: object, sdk: type, name: str
) -> None:
    client = model_client(model)
    assert type(client) is codec.Client  # type: ignore[attr-defined]
    assert isinstance(client.sdk, sdk) and not client.is_async
    assert client.model == name and client.stream


def test_an_async_client_and_options_on_request() -> None:
    client = model_client("anthropic:claude-sonnet-4-5", is_async=True, stream=False, top_k=5)
    assert isinstance(client.sdk, anthropic.AsyncAnthropic) and client.is_async
    assert not client.stream and client.options == {"top_k": 5}


def test_the_base_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://localhost:8080")
    assert str(model_client("openai:llama3").sdk.base_url) == "http://localhost:11434/v1/"
    assert str(model_client("anthropic:claude").sdk.base_url) == "http://localhost:8080"


@pytest.mark.parametrize(
    ("model", "dialect", "base_url", "key"),
    [
        ("deepseek:deepseek-chat", "deepseek", "https://api.deepseek.com", "DEEPSEEK_API_KEY"),
        (
            "openrouter:deepseek/deepseek-r1",
            "openrouter",
            "https://openrouter.ai/api/v1/",
            "OPENROUTER_API_KEY",
        ),
        ("ollama:qwen3:8b", "ollama", "http://localhost:11434/v1/", None),
        ("vllm:Qwen/Qwen3-8B", "vllm", "http://localhost:8000/v1/", None),
        ("lmstudio:qwen/qwen3-8b", "lmstudio", "http://localhost:1234/v1/", None),
    ],
)
def test_an_openai_compatible_server_s_string_builds_its_dialect_s_client(
    monkeypatch: pytest.MonkeyPatch, model: str, dialect: str, base_url: str, key: str | None
) -> None:
    if key is not None:
        with pytest.raises(MissingAPIKey, match=key):
            model_client(model)
        monkeypatch.setenv(key, "sk-test-not-a-key")
    client = model_client(model, is_async=True)
    assert type(client) is openai_chat.Client and client.dialect is openai_chat.DIALECTS[dialect]
    assert isinstance(client.sdk, openai.AsyncOpenAI) and str(client.sdk.base_url) == base_url
    assert client.model == model.partition(":")[2]
    assert client.options == {"token_limit_field": "max_tokens"}
    prefix = model.partition(":")[0].upper()
    monkeypatch.setenv(f"{prefix}_BASE_URL", "http://gpu-box:9000/v1")
    monkeypatch.setenv(f"{prefix}_API_KEY", "sk-local")
    moved = model_client(model)
    assert str(moved.sdk.base_url) == "http://gpu-box:9000/v1/" and moved.sdk.api_key == "sk-local"


@pytest.mark.parametrize("model", ["ollama", "deepseek:"])
def test_a_server_s_string_names_its_model(model: str) -> None:
    with pytest.raises(InvalidSpec, match="names no model"):
        model_client(model)


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1", "OPENAI_API_KEY"),
        ("openai-responses:gpt-4.1", "OPENAI_API_KEY"),
    ],
)
def test_a_missing_key_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, model: str, variable: str
) -> None:
    monkeypatch.delenv(variable)
    with pytest.raises(MissingAPIKey) as raised:
        model_client(model)
    assert str(raised.value) == f"{variable} is not set: export it to use the model {model}"
    assert raised.value.variable == variable and isinstance(raised.value, TurnstileError)


@pytest.mark.parametrize("model", ["gemini:gemini-2.5-pro", "gpt-4.1", ""])
def test_an_unknown_provider_names_the_known_ones(model: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        model_client(model)
    assert str(raised.value) == (
        f"model: {model!r} names no provider: a model string starts with anthropic:, openai:, "
        "openai-chat:, openai-responses:, deepseek:, openrouter:, ollama:, vllm:, lmstudio:"
    )


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ModuleNotFoundError
    with pytest.raises(MissingExtra) as raised:
        model_client("openai-responses:gpt-4.1")
    assert str(raised.value) == (
        "the model openai-responses:gpt-4.1 needs the openai package: "
        "pip install 'turnstile[openai]'"
    )


class Asked:
    """A model client that keeps the model each request asked for."""

    def __init__(self) -> None:
        self.models: list[str | None] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.models.append(request.model)
        return ModelResponse([Text("ok")], ModelStop.end_turn)


def ask(client: Any, model: str | None) -> None:
    client.complete(ModelRequest(None, [UserMessage("q")], (), 64, model=model))


def test_a_router_sends_each_request_to_the_client_of_its_model() -> None:
    deepseek, claude, default = Asked(), Asked(), Asked()
    router = ModelRouter(
        {"deepseek:deepseek-reasoner": deepseek, "anthropic:claude-sonnet-4-5": claude,
         "fast": default},
        default,
    )  # fmt: skip
    for model in ("deepseek:deepseek-reasoner", "anthropic:claude-sonnet-4-5", "fast", "x", None):
        ask(router, model)
    assert deepseek.models == ["deepseek-reasoner"]  # the name after the provider's prefix
    assert claude.models == ["claude-sonnet-4-5"]
    assert default.models == [None, "x", None]  # no prefix: the client's own; else as asked
    lone = ModelRouter({"anthropic:claude-sonnet-4-5": claude})
    with pytest.raises(ProviderError, match="no client for the model 'x'") as failed:
        ask(lone, "x")
    assert not failed.value.retryable


def test_a_router_is_built_only_for_model_strings() -> None:
    default = Asked()
    assert ModelRouter.for_models(("claude-opus-4-1", "qwen3:8b"), default, is_async=False) is (
        default
    )
    router = ModelRouter.for_models(
        ("claude-opus-4-1", "anthropic:claude-sonnet-4-5"), default, is_async=True
    )
    assert type(router) is ModelRouter and router.default is default
    (client,) = router.clients.values()
    assert type(client) is anthropic_messages.Client and client.is_async and router.is_async


def test_a_history_from_another_format_is_carried_over_to_the_client_s() -> None:
    """A fallback to another provider sends the history by `portable`'s rules: another
    format's blocks are left out, not refused."""
    seen: list[ModelRequest] = []

    class Claude(anthropic_messages.Client):
        def complete(self, request: ModelRequest, **_: Any) -> ModelResponse:
            seen.append(request)
            return ModelResponse([Text("ok")], ModelStop.end_turn)

    searched = Opaque("openai_responses", {"type": "web_search_call", "id": "ws_1"})
    history = [UserMessage("q"), AssistantMessage([searched, Text("Shanghai.")]), UserMessage("ok")]
    claude = Claude(anthropic.Anthropic(api_key="sk-ant-test-not-a-key"))
    router = ModelRouter({"anthropic:claude-sonnet-4-5": claude})
    router.complete(ModelRequest(None, history, (), 64, model="anthropic:claude-sonnet-4-5"))
    assert seen[0].messages[1] == AssistantMessage([Text("Shanghai.")])
    plain = ModelRequest(None, history[:1], (), 64, model="anthropic:claude-sonnet-4-5")
    router.complete(plain)
    assert seen[1].messages is plain.messages  # nothing to carry: the same history
    # a run's views of its growing ledger: what was seen clean is not looked at again, what
    # comes later is
    ledger = [history[0], AssistantMessage([Text("Shanghai.")]), UserMessage("ok")]
    for n in (1, 3):
        request = ModelRequest(
            None, History(ledger, n), (), 64, model="anthropic:claude-sonnet-4-5"
        )
        router.complete(request)
        assert seen[-1].messages is request.messages
    ledger += [AssistantMessage([searched, Text("Tomorrow too.")]), UserMessage("ok")]
    router.complete(
        ModelRequest(None, History(ledger), (), 64, model="anthropic:claude-sonnet-4-5")
    )
    assert seen[-1].messages[3] == AssistantMessage([Text("Tomorrow too.")])
