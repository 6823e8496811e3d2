"""A fork's lineage: what it changes (`Change`), the header record naming its parent (`Parent`),
a parent's records read without decoding them (`Source`), and the point a fork is cut at."""

from __future__ import annotations

__all__ = [
    "Ask",
    "Change",
    "Parent",
    "ParentChanged",
    "Policy",
    "Source",
    "frames",
    "parent_of",
    "point",
    "record",
]

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal
from zlib import crc32

import msgspec
from turnstile.core import (
    Event,
    LoopSpec,
    RunTool,
    ToolOutcome,
    ToolReturned,
    TurnstileError,
)
from turnstile.core.messages import Message

from ._journal import (
    _FRAME,
    _HEADER,
    _LENGTH,
    FORKED,
    MAGIC,
    CorruptJournal,
    header_record,
)

Ask = Callable[[RunTool, ToolReturned], bool]
"""Asked, per call a fork could serve, whether to serve the parent's result (True) or run it."""
Policy = Literal["recorded", "replay_safe"] | Ask
_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(Event).decode


class ParentChanged(TurnstileError):
    """The parent a fork's journal names is gone, or its records before the fork point are no
    longer those the fork was cut from (their digest differs): the fork cannot be served from
    it."""

    def __init__(self, path: Path, index: int, reason: str) -> None:
        self.path = path
        self.index = index
        super().__init__(f"{path}: the parent of this fork (at event {index}) {reason}")


class Change(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a fork changes: the prompt (a message sent at the fork point: a mid-run loop is
    cancelled there and goes on with it as a new run), the model asked, the system
    instructions, tools' results and approvals' answers (by call id: `True` approves, `False`
    or a reason denies), and which recorded results are served (`policy`)."""

    prompt: str | list[Message] | None = None
    model: str | None = None
    system: str | None = None
    results: dict[str, ToolOutcome] = {}
    approvals: dict[str, bool | str] = {}
    policy: Literal["recorded", "replay_safe"] = "recorded"

    def spec(self, spec: LoopSpec) -> LoopSpec:
        """`spec` with the model and the system instructions changed, if they are."""
        if self.model is not None:
            spec = msgspec.structs.replace(spec, models=(self.model,))
        if self.system is not None:
            spec = msgspec.structs.replace(spec, system=self.system)
        return spec


class Parent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A fork journal's header record. `path`: the parent's journal, relative to the fork's
    folder (None: the parent was a loop or a dump, nothing is served on resume); `run`: the
    parent run's id (a digest of its first record); `index`: the fork point (the fork holds
    the parent's first `index` events); `digest`: sha256 of those records as the parent holds
    them; `own`: the events the fork wrote itself when cut (a `Started` it begins with)."""

    path: str | None
    run: str
    index: int
    digest: str
    own: int = 0
    change: Change = Change()


_decode_parent = msgspec.json.Decoder(Parent).decode


class _CallId(msgspec.Struct):
    call_id: str | None = None


_decode_call = msgspec.json.Decoder(_CallId).decode


def record(payload: bytes) -> bytes:
    length = _LENGTH.pack(len(payload))
    return _FRAME.pack(len(payload), crc32(length), crc32(payload)) + payload


class Source:
    """A parent's records, read without decoding them: the bytes of each (frame included),
    their kinds (an event's tag), and the header record if it is a fork itself."""

    def __init__(self, records: list[bytes], path: Path | None = None) -> None:
        self.records = records
        self.path = path

    @classmethod
    def of_events(cls, events: Sequence[Event]) -> Source:
        return cls([record(_encode(e)) for e in events])

    @classmethod
    def of_journal(cls, path: Path) -> Source:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CorruptJournal(path, 0, f"cannot read it: {e.strerror}") from None
        return cls(frames(data, path), path)

    def kind(self, i: int) -> str:
        """The tag of record `i`'s event (msgspec writes the tag first)."""
        record = self.records[i]
        return record[_FRAME.size + 9 : record.index(b'"', _FRAME.size + 9)].decode()

    def call_id(self, i: int) -> str | None:
        return _decode_call(memoryview(self.records[i])[_FRAME.size :]).call_id

    def event(self, i: int) -> Event:
        return _decode_event(memoryview(self.records[i])[_FRAME.size :])

    def run(self) -> str:
        return hashlib.sha256(self.records[0]).hexdigest()[:16] if self.records else ""

    def digest(self, index: int) -> str:
        h = hashlib.sha256()
        for record in self.records[:index]:
            h.update(record)
        return h.hexdigest()


def frames(data: bytes, path: Path) -> list[bytes]:
    """Each whole record of a journal's bytes (frame and payload), checked but not decoded;
    a torn tail ends them, damage raises `CorruptJournal` (as reading the journal would)."""
    if not data.startswith(MAGIC) or len(data) < len(_HEADER):
        raise CorruptJournal(path, 0, "not a turnstile journal (or an empty one)")
    [version] = _LENGTH.unpack_from(data, len(MAGIC))
    if not 1 <= version <= FORKED:
        raise CorruptJournal(path, len(MAGIC), f"unknown journal schema {version}")
    pos = header_record(data, path)[1]
    out, size = [], len(data)
    while size - pos >= _FRAME.size:
        length, length_crc, payload_crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if length == 0 or crc32(data[pos : pos + 4]) != length_crc or end > size:
            break
        if crc32(memoryview(data)[pos + _FRAME.size : end]) != payload_crc:
            if data.count(0, end) != size - end:
                raise CorruptJournal(path, pos, "damaged record: its checksum does not match")
            break
        out.append(data[pos:end])
        pos = end
    return out


def point(at: int | str | None, change: Change, source: Source) -> int:
    """The index of the event a fork is cut before: `at` as an index (negative from the end),
    `"turn:N"` (before the N-th model reply), `"call:ID"` (before call ID's result); None: the
    one call whose result or answer the change gives."""
    n = len(source.records)
    if at is None:
        named = [*change.results, *change.approvals]
        if len(named) != 1:
            raise ValueError("say where to fork (at=): an index, 'turn:N' or 'call:ID'")
        want = ("tool_returned",) if change.results else ("approved", "denied")
        return _find(source, named[0], want)
    if isinstance(at, int):
        index = at + n if at < 0 else at
        if not 0 <= index <= n:
            raise ValueError(f"no event {at}: the run has {n} events")
        return index
    kind, _, value = at.partition(":")
    if kind == "turn" and value.isdigit() and int(value) >= 1:
        replies = [i for i in range(n) if source.kind(i) == "model_replied"]
        if int(value) > len(replies):
            raise ValueError(f"no turn {value}: the run has {len(replies)} model replies")
        return replies[int(value) - 1]
    if kind == "call" and value:
        return _find(source, value, ("tool_returned",))
    raise ValueError(f"fork at {at!r}? say an index, 'turn:N' or 'call:ID'")


def _find(source: Source, call_id: str, kinds: tuple[str, ...]) -> int:
    for i in range(len(source.records)):
        if source.kind(i) in kinds and source.call_id(i) == call_id:
            return i
    raise ValueError(f"no {' or '.join(kinds)} event for call {call_id!r} in the run")


def parent_of(header: bytes) -> Parent:
    """A fork journal's header record, decoded."""
    return _decode_parent(header)
