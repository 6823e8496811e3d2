"""Messages API requests read back: a request body as the neutral request and the options that
encode it again, so a conversation recorded elsewhere can be carried on, or compared, here."""

from __future__ import annotations

__all__ = ["decode_request"]

import base64
import binascii
from typing import Any

from msgspec.structs import replace
from turnstile.core import ModelRequest, ToolSpec
from turnstile.core.messages import (
    AssistantMessage,
    Document,
    Image,
    Instructions,
    Message,
    Opaque,
    Part,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    ToolResults,
    UserMessage,
)
from turnstile.core.request import CachePolicy, ServerTool
from turnstile.providers._errors import DecodeError
from turnstile.providers._wire import expect, field, kept

from ._blocks import FORMAT, content_blocks, tool_result
from ._encode import STRING_REPLY, assistant_block, encode, tool_definition


def decode_request(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    """The neutral request a POST /v1/messages body says, and the `encode` options that give it
    back: `encode(request, **options) == body` (`options` holds `model`).

    Each block becomes its neutral part where encoding that part gives the block again, and an
    `Opaque` of it otherwise (a `cache_control` mark, whitespace-only text in a reply, a tool
    search's `tool_reference`, a block type newer than the codec): it goes back verbatim, in
    place. Function tools (deferred ones too: `ToolSpec.defer_loading`) become `ToolSpec`s, so
    the loop can run their calls; every other tool (a server tool, a tool with a mark) is a
    `ServerTool` kept verbatim at its `position`, so the tools go back in the order they came. A
    request with no tools keeps its history's tool calls and results verbatim too, so it gains
    none on the way back. A system prompt given as blocks, and every other field (`tool_choice`,
    `thinking`, `stream`, ...), is an option, verbatim. Breakpoints (`cache_control`) exactly
    where `encode` puts them read as caching on (`request.cache`), and the blocks they mark as
    the parts they would be without them.

    Raises `DecodeError` (naming the path) for a body without `model`, `max_tokens` or
    `messages`, and for a message whose role or content the API does not take.
    """
    expect(body, dict, "")
    request, options = _read(body)
    mark = _first_mark(body)
    if mark is not None:  # the breakpoints encode would place: caching on, the blocks neutral
        unmarked, unmarked_options = _read(_unmarked(body))
        cached = replace(unmarked, cache=CachePolicy(ttl="1h" if mark.get("ttl") == "1h" else "5m"))
        if _unlike(lambda r: encode(r, **unmarked_options), cached, body) is False:
            return cached, unmarked_options
    return request, options


def _read(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    options = {
        k: kept(v, k) for k, v in body.items() if k not in ("max_tokens", "messages", "tools")
    }
    field(body, "model", str, "")
    max_tokens = field(body, "max_tokens", int, "")
    system = options.pop("system", None) if isinstance(body.get("system"), str) else None
    tools, server_tools = _tools(body)
    messages: list[Message] = []
    for i, message in enumerate(field(body, "messages", list, "")):
        messages += _message(message, f"messages[{i}]", "tools" in body)
    request = ModelRequest(system, messages, tools, max_tokens, server_tools=tuple(server_tools))
    return request, options


def _first_mark(value: Any) -> dict[str, Any] | None:
    """The first `cache_control` in `value`, depth first."""
    if isinstance(value, dict):
        if isinstance(value.get("cache_control"), dict):
            return value["cache_control"]  # type: ignore[no-any-return]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            if (mark := _first_mark(item)) is not None:
                return mark
    return None


def _unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without the breakpoints `encode` may place (on tools, system blocks and messages'
    blocks), a system prompt of one text block as its text."""

    def bare(blocks: Any) -> Any:
        if not isinstance(blocks, list):
            return blocks
        return [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict)
                else b for b in blocks]  # fmt: skip

    out = {k: bare(v) if k in ("tools", "system") else v for k, v in body.items()}
    system = out.get("system")
    if isinstance(system, list) and len(system) == 1 and isinstance(system[0], dict):
        if system[0].keys() == {"type", "text"} and system[0]["type"] == "text":
            out["system"] = system[0]["text"]
    messages = body.get("messages")
    if isinstance(messages, list):
        out["messages"] = [
            {**m, "content": bare(m.get("content"))} if isinstance(m, dict) else m for m in messages
        ]
    return out


def _tools(body: dict[str, Any]) -> tuple[tuple[ToolSpec, ...], list[ServerTool]]:
    """The function tools as `ToolSpec`s, every other tool kept verbatim at its index; those
    after the last function tool go back after them anyway, so they take no position."""
    specs: list[ToolSpec] = []
    kept_: list[tuple[int, dict[str, Any]]] = []
    last = -1  # the last function tool's index
    for i, tool in enumerate(body.get("tools", ())):
        spec = _spec(expect(tool, dict, f"tools[{i}]"))
        if spec is None:
            kept_.append((i, kept(tool, f"tools[{i}]")))
        else:
            specs.append(spec)
            last = i
    placed_ = [ServerTool(FORMAT, tool, position=i if i < last else None) for i, tool in kept_]
    return tuple(specs), placed_


def _spec(tool: dict[str, Any]) -> ToolSpec | None:
    """The tool as a `ToolSpec`, when that is written back as it is."""
    try:
        spec = ToolSpec(
            tool["name"],
            tool.get("description", ""),
            tool["input_schema"],
            strict=tool.get("strict"),
            defer_loading=tool.get("defer_loading") is True,
        )
    except (KeyError, TypeError, ValueError):
        return None
    return spec if tool_definition(spec) == tool else None


def _message(message: Any, path: str, has_tools: bool) -> list[Message]:
    role = field(expect(message, dict, path), "role", str, path)
    content = message.get("content")
    if role == "system" and isinstance(content, list) and len(content) == 1:  # caching's form
        block = content[0]
        plain = isinstance(block, dict) and block.keys() == {"type", "text"}
        content = block["text"] if plain and block["type"] == "text" else None
    if role == "system" and isinstance(content, str):
        return [Instructions(content)]
    if not isinstance(content, str | list) or role not in ("user", "assistant"):
        raise DecodeError(f"{path}", f"a {role!r} message the API does not take")
    if role == "assistant":
        if isinstance(content, str):
            return [AssistantMessage([Text(content, provider_data=STRING_REPLY)])]
        return [AssistantMessage([_reply_part(b, f"{path}.content[{i}]", has_tools)
                                  for i, b in enumerate(content)])]  # fmt: skip
    if isinstance(content, str):
        return [UserMessage(content)]
    said: list[Message] = []
    for i, block in enumerate(content):
        part = _user_part(block, f"{path}.content[{i}]", has_tools)
        if type(part) is ToolResult:
            if said and type(said[-1]) is ToolResults:
                said[-1].results.append(part)
            else:
                said.append(ToolResults([part]))
        elif said and type(said[-1]) is UserMessage:
            said[-1].content.append(part)  # type: ignore[union-attr]
        else:
            said.append(UserMessage([part]))
    return said or [UserMessage([])]


def _reply_part(block: Any, path: str, has_tools: bool) -> Part:
    kind = field(expect(block, dict, path), "type", str, path)
    part: Part | None = None
    text, signature, data = (block.get(k) for k in ("text", "signature", "data"))
    if kind == "text" and isinstance(text, str):
        citations = block.get("citations")
        part = Text(text, provider_data={"citations": citations} if citations else None)
    elif kind == "thinking" and isinstance(block.get("thinking"), str):
        part = Thinking(block["thinking"], signature=signature)
    elif kind == "redacted_thinking" and isinstance(data, str):
        part = Thinking("", redacted=True, provider_data={"data": data})
    elif kind == "tool_use" and has_tools and isinstance(block.get("input"), dict):
        part = ToolCall(str(block.get("id")), str(block.get("name")), block["input"])
    return _verbatim(block, path) if part is None or _unlike(assistant_block, part, block) else part


def _user_part(block: Any, path: str, has_tools: bool) -> Any:
    if field(expect(block, dict, path), "type", str, path) == "tool_result":
        result = _result(block) if has_tools else None
        if result is not None and not _unlike(tool_result, result, block):
            return result
        return _verbatim(block, path)
    part = _shown(block)
    if part is None or _unlike(lambda p: content_blocks([p])[0], part, block):
        return _verbatim(block, path)
    return part


def _result(block: dict[str, Any]) -> ToolResult | None:
    content = block.get("content", "")
    if isinstance(content, list):
        content = [_shown(b) or Opaque(FORMAT, b) for b in content if isinstance(b, dict)]
    if not isinstance(block.get("tool_use_id"), str) or not isinstance(content, str | list):
        return None
    return ToolResult(block["tool_use_id"], content, is_error=block.get("is_error") is True)


def _shown(block: dict[str, Any]) -> Any:
    """A user turn's (or a tool result's) text, image or document as its part, or None."""
    kind = block.get("type")
    try:
        if kind == "text":
            return Text(block["text"]) if isinstance(block["text"], str) else None
        if kind not in ("image", "document"):
            return None
        source = block["source"]
        where: dict[str, Any] = {}
        if source["type"] == "base64":
            where = {"media_type": source["media_type"], "data": base64.b64decode(source["data"])}
        elif source["type"] == "text":
            where = {"media_type": source["media_type"], "data": source["data"].encode()}
        elif source["type"] == "url":
            where = {"url": source["url"]}
        elif source["type"] == "file":
            where = {"file_id": source["file_id"]}
        if kind == "image":
            return Image(**where)
        return Document(**where, title=block.get("title"))
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error):
        return None


def _unlike(encode: Any, part: Any, block: dict[str, Any]) -> bool:
    """Whether `part` encodes to something other than `block` (or cannot be encoded)."""
    try:
        return bool(encode(part) != block)
    except Exception:  # a part the encoder refuses: the block goes back verbatim
        return True


def _verbatim(block: dict[str, Any], path: str) -> Opaque:
    return Opaque(FORMAT, kept(block, path))
