"""Anthropic content blocks beside the codec: the neutral parts as blocks (text, images and
documents in user turns and tool results, this format's kept blocks), and on the way back the
rule telling a block type newer than the codec from a misspelled client one."""

from __future__ import annotations

__all__ = [
    "CLIENT_BLOCKS",
    "FORMAT",
    "citations_of",
    "content_blocks",
    "opaque",
    "tool_result",
    "unknown",
]

import base64
from collections.abc import Sequence
from typing import Any

from turnstile.core.messages import Document, Image, Opaque, ResultPart, Text, ToolResult, UserPart
from turnstile.providers._errors import DecodeError, UnsupportedContent

FORMAT = "anthropic_messages"
_EMPTY_ERROR = "(the tool failed without a message)"


def citations_of(part: Text) -> list[Any] | None:
    """The citations a reply's text block came with (kept by `decode`), to send back."""
    data = part.provider_data
    citations = data.get("citations") if isinstance(data, dict) else None
    return citations if isinstance(citations, list) else None


def opaque(part: Opaque) -> dict[str, Any]:
    if part.format != FORMAT:
        raise UnsupportedContent(FORMAT, f"{part.format} content ({part.data.get('type')!r})")
    return part.data


def content_blocks(parts: Sequence[UserPart | ResultPart]) -> list[dict[str, Any]]:
    """The blocks of a user message or a tool result: text, images, documents, and blocks of this
    format kept verbatim; anything else is refused (`UnsupportedContent`)."""
    blocks: list[dict[str, Any]] = []
    for part in parts:
        match part:
            case Text(text=text):
                blocks.append({"type": "text", "text": text})
            case Image():
                blocks.append({"type": "image", "source": _source(part, _IMAGE_TYPES)})
            case Document(title=title, name=name):
                block: dict[str, Any] = {"type": "document"}
                block["source"] = _source(part, _DOCUMENT_TYPES)
                if title or name:  # the API has no file name: it is the title the model sees
                    block["title"] = title or name
                blocks.append(block)
            case Opaque():
                blocks.append(opaque(part))
            case _:
                raise UnsupportedContent(FORMAT, type(part).__name__.lower())
    return blocks


_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DOCUMENT_TYPES = frozenset({"application/pdf", "text/plain"})


def _source(part: Image | Document, types: frozenset[str]) -> dict[str, Any]:
    """Where an image or a document comes from: inline (base64; a plain-text document as its
    text), a URL, or a file of the Files API."""
    kind = "an image" if type(part) is Image else "a document"
    if part.media_type is not None and part.media_type not in types:
        raise UnsupportedContent(FORMAT, f"{kind} of type {part.media_type}")
    if part.url is not None:
        return {"type": "url", "url": part.url}
    if part.data is None:
        return {"type": "file", "file_id": part.file_id}
    if part.media_type == "text/plain":
        try:
            return {"type": "text", "media_type": "text/plain", "data": part.data.decode()}
        except UnicodeDecodeError:
            raise UnsupportedContent(FORMAT, "a text/plain document that is not UTF-8") from None
    data = base64.b64encode(part.data).decode("ascii")
    return {"type": "base64", "media_type": part.media_type, "data": data}


def tool_result(result: ToolResult) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    content = result.content if isinstance(result.content, str) else content_blocks(result.content)
    if content or result.is_error:
        block["content"] = content or _EMPTY_ERROR
    if result.is_error:
        block["is_error"] = True
    return block


CLIENT_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")


def unknown(block: dict[str, Any], kind: str, path: str) -> dict[str, Any]:
    """A block of a type the codec does not know: a server tool's, or one newer than the codec,
    unless its type is a misspelling of a client block's (within a quarter of its letters, at
    most 4 edits: `tool_uze`, `txt`), which no API version sends: that is a broken reply."""
    for known in CLIENT_BLOCKS:
        if _edits(kind.lower(), known) <= len(known) // 4:
            raise DecodeError(f"{path}.type", f"{kind!r} is a misspelling of {known!r}")
    return block


def _edits(a: str, b: str) -> int:
    """How many letters added, dropped, changed or swapped with the next turn `a` into `b`."""
    if abs(len(a) - len(b)) > 4:
        return 5
    before, row = list(range(len(b) + 1)), list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        earlier, before, row = before, row, [i]
        for j, y in enumerate(b, 1):
            cost = min(before[j] + 1, row[j - 1] + 1, before[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, earlier[j - 2] + 1)
            row.append(cost)
    return row[-1]
