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
    "first_record",
    "parent_of",
    "point",
    "record",
    "unchanged_past",
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

from ._effects import Edit
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
    or a reason denies, an `Edit` approves with its arguments), and which recorded results are
    served (`policy`)."""

    prompt: str | list[Message] | None = None
    model: str | None = None
    system: str | None = None
    results: dict[str, ToolOutcome] = {}
    approvals: dict[str, bool | str | Edit] = {}
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
_ANSWERS = ("approved", "denied")


def record(payload: bytes) -> bytes:
    length = _LENGTH.pack(len(payload))
    return _FRAME.pack(len(payload), crc32(length), crc32(payload)) + payload


class Source:
    """A parent's records, read without decoding them: `data` holds them whole, one after
    another, record `i` (frame included) from `offsets[i]` to `offsets[i + 1]`. A journal's
    frames are walked only as far as they are asked for (a fork needs those before its point)."""

    def __init__(
        self, data: bytes, offsets: list[int], path: Path | None = None, walked: bool = True
    ) -> None:
        self.data = memoryview(data)
        self.offsets = offsets
        self.path = path
        self._walked = walked

    @classmethod
    def of_events(cls, events: Sequence[Event]) -> Source:
        records = [record(_encode(e)) for e in events]
        offsets = [0]
        for r in records:
            offsets.append(offsets[-1] + len(r))
        return cls(b"".join(records), offsets)

    @classmethod
    def of_journal(cls, path: Path) -> Source:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise CorruptJournal(path, 0, f"cannot read it: {e.strerror}") from None
        return cls(data, [first_record(data, path)], path, walked=False)

    def __len__(self) -> int:
        if not self._walked:
            self._walk(None)
        return len(self.offsets) - 1

    def has(self, i: int) -> bool:
        """Whether there is a record `i`."""
        if i + 1 >= len(self.offsets) and not self._walked:
            self._walk(i + 1)
        return i + 1 < len(self.offsets)

    def _walk(self, upto: int | None) -> None:
        """Find where the records end, up to record `upto` (None: all), their lengths checked
        (their payloads are `check`'s): a torn tail ends them."""
        data, offsets, unpack = self.data, self.offsets, _FRAME.unpack_from
        pos, size = offsets[-1], len(data)
        while upto is None or len(offsets) <= upto:
            if size - pos < 12:
                break
            length, length_crc, _ = unpack(data, pos)
            end = pos + 12 + length
            if end > size or length == 0 or crc32(data[pos : pos + 4]) != length_crc:
                break
            offsets.append(end)
            pos = end
        else:
            return
        self._walked = True

    def records(self, start: int, stop: int) -> memoryview:
        """Records `start` to `stop` (not included), as they are written."""
        return self.data[self.offsets[start] : self.offsets[stop]]

    def kind(self, i: int) -> str:
        """The tag of record `i`'s event (msgspec writes the tag first)."""
        at = self.offsets[i] + _FRAME.size + 9
        return bytes(self.data[at : at + 24]).partition(b'"')[0].decode()

    def call_id(self, i: int) -> str | None:
        return _decode_call(self.records(i, i + 1)[_FRAME.size :]).call_id

    def event(self, i: int) -> Event:
        return _decode_event(self.records(i, i + 1)[_FRAME.size :])

    def run(self) -> str:
        return hashlib.sha256(self.records(0, 1)).hexdigest()[:16] if self.has(0) else ""

    def check(self, stop: int) -> None:
        """Check the payloads of the first `stop` records: `CorruptJournal` for damage; a last
        record a power loss left unwritten (zeros after it) is dropped, as reading drops it."""
        self.has(stop - 1)
        data, offsets, unpack = self.data, self.offsets, _FRAME.unpack_from
        for i in range(min(stop, len(offsets) - 1)):
            at, end = offsets[i], offsets[i + 1]
            if crc32(data[at + _FRAME.size : end]) != unpack(data, at)[2]:
                if i == len(self) - 1 and not any(data[end:]):
                    del offsets[-1]
                    return
                assert self.path is not None  # (records made here are whole)
                raise CorruptJournal(self.path, at, "damaged record: its checksum does not match")

    def digest(self, index: int) -> str:
        return hashlib.sha256(self.records(0, index)).hexdigest()


def first_record(data: bytes, path: Path) -> int:
    """Where a journal's first event record starts, its header checked."""
    if not data.startswith(MAGIC) or len(data) < len(_HEADER):
        raise CorruptJournal(path, 0, "not a turnstile journal (or an empty one)")
    [version] = _LENGTH.unpack_from(data, len(MAGIC))
    if not 1 <= version <= FORKED:
        raise CorruptJournal(path, len(MAGIC), f"unknown journal schema {version}")
    return header_record(data, path)[1]


def point(at: int | str | None, change: Change, source: Source) -> int:
    """The index of the event a fork is cut before: `at` as an index (negative from the end),
    `"turn:N"` (before the N-th model reply), `"call:ID"` (before call ID's result); None: the
    one call whose result or answer the change gives."""
    if at is None:
        named = [*change.results, *change.approvals]
        if len(named) != 1:
            raise ValueError("say where to fork (at=): an index, 'turn:N' or 'call:ID'")
        want = ("tool_returned",) if change.results else _ANSWERS
        return _find(source, named[0], want)
    if isinstance(at, int):
        index = at + len(source) if at < 0 else at
        if index < 0 or (index > 0 and not source.has(index - 1)):
            raise ValueError(f"no event {at}: the run has {len(source)} events")
        return index
    kind, _, value = at.partition(":")
    if kind == "turn" and value.isdigit() and int(value) >= 1:
        i = replies = 0
        while source.has(i):
            if source.kind(i) == "model_replied":
                replies += 1
                if replies == int(value):
                    return i
            i += 1
        raise ValueError(f"no turn {value}: the run has {replies} model replies")
    if kind == "call" and value:
        return _find(source, value, ("tool_returned",))
    raise ValueError(f"fork at {at!r}? say an index, 'turn:N' or 'call:ID'")


def _find(source: Source, call_id: str, kinds: tuple[str, ...], stop: int | None = None) -> int:
    i = 0
    while (stop is None or i < stop) and source.has(i):
        if source.kind(i) in kinds and source.call_id(i) == call_id:
            return i
        i += 1
    raise ValueError(f"no {' or '.join(kinds)} event for call {call_id!r} in the run")


def unchanged_past(change: Change, source: Source, index: int) -> None:
    """A `ValueError` if a result or an answer the change gives came before the fork point:
    the fork could never use it."""
    for names, kinds in ((change.results, ("tool_returned",)), (change.approvals, _ANSWERS)):
        for call_id in names:
            try:
                at = _find(source, call_id, kinds, index)
            except ValueError:
                continue
            raise ValueError(
                f"call {call_id!r} was answered at event {at}, before the fork point ({index}): "
                f"fork at call:{call_id} or before"
            )


def parent_of(header: bytes) -> Parent:
    """A fork journal's header record, decoded."""
    return _decode_parent(header)
