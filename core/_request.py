"""What a model request may ask of a provider beyond the conversation: which tools the model
may or must call, tools the provider runs itself, prompt caching, and a shape for the answer.
Plain data, decided by the spec and the loop; each codec writes them in its format's words, and
refuses (`UnsupportedPart`... a typed error) what its format cannot say."""

from __future__ import annotations

__all__ = ["CachePolicy", "OutputFormat", "ServerTool", "ToolChoice", "UseTool"]

from typing import Any, Literal

import msgspec

from ._fields import check_fields


class UseTool(msgspec.Struct, frozen=True, tag="use_tool"):
    """The model must call the tool `name`."""

    name: str


ToolChoice = Literal["auto", "required", "none"] | UseTool
"""May the model call tools ("auto"), must it ("required", `UseTool`), or may it not ("none")."""


class ServerTool(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool the provider runs itself (web search, code execution...), for one wire `format`
    ("anthropic_messages", "openai_chat", "openai_responses"): `definition` joins the request's
    tools as that format writes it, after the request's own tools, or at index `position` of
    that format's list of tools (a request recorded with its hosted tools first). Requests in
    other formats leave it out."""

    format: str
    definition: dict[str, Any]
    position: int | None = None

    def __post_init__(self) -> None:
        check_fields(self)


class CachePolicy(msgspec.Struct, frozen=True, omit_defaults=True):
    """Prompt caching, on unless `enabled=False`. Anthropic: breakpoints on the tools, the system
    prompt and the end of the newest message (`ttl` "5m" or "1h"); OpenAI: a `prompt_cache_key`,
    `key` or else one the loop derives per conversation, so its requests land on one cache."""

    enabled: bool = True
    key: str | None = None
    ttl: Literal["5m", "1h"] = "5m"

    def __post_init__(self) -> None:
        check_fields(self)


class OutputFormat(msgspec.Struct, frozen=True, omit_defaults=True):
    """Ask the provider itself to shape the answer as JSON matching `schema` (a format's native
    structured output), `name`d for formats that name it."""

    name: str
    schema: dict[str, Any]
    strict: bool = True
