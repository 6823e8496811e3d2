"""The official SDK clients a replay serves: each provider's (and each cloud's) client over a
replay transport, with credentials that open nothing and nothing taken from the environment."""

from __future__ import annotations

__all__ = ["Cloud", "offline_sdk", "replay_client"]

from typing import TYPE_CHECKING, Any, Literal, overload

from ._optional import required

# httpx2 as `_transport` imports it, which names the extra that installs it when it is missing
from ._transport import AsyncReplayTransport, ReplayTransport, Trace, TraceError, httpx2

if TYPE_CHECKING:
    import anthropic
    import openai

    SyncSDK = anthropic.Anthropic | openai.OpenAI
    AsyncSDK = anthropic.AsyncAnthropic | openai.AsyncOpenAI

Cloud = Literal["bedrock", "vertex", "azure"]
"""Where else a provider's API is served, through its SDK's own client: Anthropic on Amazon
Bedrock or Google Vertex AI, OpenAI on Azure."""

_REPLAY_KEY = "replay-key-not-a-secret"
_REPLAY_HOST = "https://replay.invalid"


@overload
def replay_client(
    trace: Trace, *, sync: Literal[True] = True
) -> tuple[SyncSDK, ReplayTransport]: ...
@overload
def replay_client(
    trace: Trace, *, sync: Literal[False]
) -> tuple[AsyncSDK, AsyncReplayTransport]: ...
def replay_client(
    trace: Trace, *, sync: bool = True
) -> tuple[SyncSDK, ReplayTransport] | tuple[AsyncSDK, AsyncReplayTransport]:
    """The official SDK client for `trace.provider` (on the cloud its loop names, if any), wired
    to a replay of `trace`.

    Returns the client and its transport (to check `transport.remaining`). The client has a dummy
    key, a fixed base URL, no retries (a recorded 5xx must reach the caller), no tracing and no
    proxies, so the environment changes neither the body it sends nor where it goes.
    """
    cloud = (trace.loop or {}).get("cloud")
    if sync:
        transport = ReplayTransport(trace)
        http = httpx2.Client(transport=transport, trust_env=False)
        return offline_sdk(trace.provider, http, cloud), transport
    atransport = AsyncReplayTransport(trace)
    ahttp = httpx2.AsyncClient(transport=atransport, trust_env=False)
    return offline_sdk(trace.provider, ahttp, cloud), atransport


_OFFLINE: dict[str, tuple[str, dict[str, Any]]] = {  # the SDK's client class and its arguments
    "anthropic": (
        "Anthropic",
        {"api_key": _REPLAY_KEY, "base_url": _REPLAY_HOST, "open_telemetry": False},
    ),
    "openai": ("OpenAI", {"api_key": _REPLAY_KEY, "base_url": f"{_REPLAY_HOST}/v1"}),
    "bedrock": (
        "AnthropicBedrock",
        {
            "aws_region": "us-east-1",
            "aws_access_key": "AKIAREPLAYNOTASECRET",
            "aws_secret_key": _REPLAY_KEY,
            "base_url": _REPLAY_HOST,
        },
    ),
    "vertex": (
        "AnthropicVertex",
        {
            "region": "us-east5",
            "project_id": "replay",
            "access_token": _REPLAY_KEY,
            "base_url": f"{_REPLAY_HOST}/v1",
        },
    ),
    "azure": (
        "AzureOpenAI",
        {"api_key": _REPLAY_KEY, "api_version": "2024-10-21", "azure_endpoint": _REPLAY_HOST},
    ),
}


def offline_sdk(
    provider: str, http: httpx2.Client | httpx2.AsyncClient, cloud: Cloud | None = None
) -> Any:
    """The SDK client for `provider` over `http` (sync or async): a dummy key, a fixed base URL,
    no retries and no tracing, so nothing in the environment changes what it sends. `cloud`:
    the SDK's client for Anthropic on Amazon Bedrock or Google Vertex AI, or OpenAI on Azure,
    with dummy credentials of its kind (Bedrock's signing needs `anthropic[bedrock]`)."""
    is_async = isinstance(http, httpx2.AsyncClient)
    name = "anthropic" if provider == "anthropic" else "openai"
    sdk: Any = required(name, name, needed_by=f"a trace of {provider}")
    if cloud is not None and (cloud == "azure") is (provider == "anthropic"):
        raise TraceError(f"a trace of {provider} cannot be on {cloud}")
    kind, options = _OFFLINE[cloud or name]
    cls = getattr(sdk, f"Async{kind}" if is_async else kind)
    return cls(**options, http_client=http, max_retries=0)
