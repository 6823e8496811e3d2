"""`Journal`: a run's events in an append-only file, so that the run can outlive its process.

The file is a header, then one record per event, written by one `write` as the event is appended
(integers little-endian):

    header   b"turnstile-journal\\n", the schema version (u32)                   22 bytes
    record   the payload's length (u32), crc32 of those 4 bytes (u32),
             crc32 of the payload (u32), the payload: the event as JSON     12 + length bytes

A fork's journal (`turnstile.executors.fork`) is schema 2: the same header with version 2, then
one record (framed as an event's) holding what names its parent, as JSON; the events follow as in
schema 1. Every other journal is still written as schema 1, byte for byte.

The length has a checksum of its own so that a damaged length is never taken for the end of the
file: a record that claims to run past the end is cut short only if its length is whole.

What a crash leaves at the end of the file is a torn tail: a header or a record cut short, a last
record whose checksum fails (a power loss can keep the size and lose the data), zero bytes past
the last record. Reading warns (`TornJournal`) and ignores it; opening for appending also cuts it
off. Anything else is damage and raises `CorruptJournal` naming its byte offset: a record that
fails its checks with more data after it, a length that fails its own check, a whole record that
is no event, a file that is not a journal or comes from a newer turnstile.
"""

from __future__ import annotations

__all__ = ["CorruptJournal", "Journal", "TornJournal", "child_path"]

import bisect
import os
import re
import struct
import warnings
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple, get_args
from zlib import crc32

import msgspec
from turnstile.core import Event, Loop, LoopSpec, TurnstileError
from turnstile.core.decoding import decoded

MAGIC = b"turnstile-journal\n"
VERSION = 1
FORKED = 2
"""The schema of a fork's journal: a header record (its parent) after the header."""
_HEADER = MAGIC + struct.pack("<I", VERSION)
_LENGTH = struct.Struct("<I")
_FRAME = struct.Struct("<III")  # length, crc32 of the length, crc32 of the payload
_EVENTS = frozenset(get_args(Event))
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Event).decode

Policy = Literal["always", "batch", "round", "never"]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def child_path(path: Path, at: int, call_id: str) -> Path:
    """The journal of a sub-agent's run (`as_tool`) under the run journaled at `path`: beside
    it, named by the event of the reply that made the call (`at`) and the call's id, so a
    resumed run finds it again and an id a later turn reuses gets its own
    (`run.journal` → `run.7-call_1.journal`). The parent's journal stays one file of its own
    events, which forks copy as they are."""
    return path.with_name(f"{path.stem}.{at}-{_UNSAFE.sub('_', call_id)}{path.suffix}")


class CorruptJournal(TurnstileError):
    """A journal that cannot be used: not a journal, from a newer turnstile, damaged before its
    end, or holding an event its loop refuses. `offset` is the byte where the trouble starts."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        super().__init__(f"{path}: byte {offset}: {reason}")


class TornJournal(UserWarning):
    """A journal ended in a torn tail (a crash cut its last write short), which was dropped."""


class _Contents(NamedTuple):
    events: list[Event]
    offsets: list[int]  # where each event's record starts
    end: int  # where the whole records end; 0 when not even the header is whole
    header: bytes | None = None  # a fork's header record (its parent), as JSON


def header_record(data: bytes, path: Path) -> tuple[bytes | None, int]:
    """A journal's header record (a fork's, schema 2; None for schema 1) and where its event
    records begin, for a header already checked up to its version. A damaged header record is
    `CorruptJournal`: a fork's journal is written whole before it is renamed into place."""
    start = len(_HEADER)
    [version] = _LENGTH.unpack_from(data, len(MAGIC))
    if version < FORKED:
        return None, start
    if len(data) - start >= _FRAME.size:
        length, length_crc, payload_crc = _FRAME.unpack_from(data, start)
        end = start + _FRAME.size + length
        payload = data[start + _FRAME.size : end]
        if crc32(data[start : start + 4]) == length_crc and crc32(payload) == payload_crc:
            if end <= len(data):
                return payload, end
    raise CorruptJournal(path, start, "damaged header record (a fork's parent)")


def _scan(data: bytes, path: Path) -> _Contents:
    """The events of a journal's bytes, and where its whole records end."""
    size = len(data)
    if size < len(_HEADER):
        if not MAGIC.startswith(data[: len(MAGIC)]):
            raise CorruptJournal(path, 0, "not a turnstile journal")
        return _Contents([], [], 0)  # empty, or a header a crash cut short
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptJournal(path, 0, "not a turnstile journal")
    [version] = _LENGTH.unpack_from(data, len(MAGIC))
    if version > FORKED:
        raise CorruptJournal(
            path,
            len(MAGIC),
            f"written by a newer turnstile (journal schema {version}, this one reads up to "
            f"{FORKED}); upgrade",
        )
    if version < 1:
        raise CorruptJournal(path, len(MAGIC), f"unknown journal schema {version}")
    events: list[Event] = []
    offsets: list[int] = []
    header, pos = header_record(data, path)
    while size - pos >= _FRAME.size:
        length, length_crc, payload_crc = _FRAME.unpack_from(data, pos)
        if length == 0 or crc32(data[pos : pos + 4]) != length_crc:
            if data.count(0, pos) == size - pos:
                break  # zeros past the end: a power loss kept the size, not the data
            raise CorruptJournal(path, pos, "damaged record: its length fails its checksum")
        end = pos + _FRAME.size + length
        if end > size:
            break  # cut short
        payload = data[pos + _FRAME.size : end]
        if crc32(payload) != payload_crc:
            if data.count(0, end) == size - end:
                break  # the last record: its data never reached the disk
            raise CorruptJournal(path, pos, "damaged record: its checksum does not match")
        events.append(decoded(_decode, payload, partial(_unknown_event, path, pos)))
        offsets.append(pos)
        pos = end
    return _Contents(events, offsets, pos, header)


def _unknown_event(path: Path, offset: int, reason: str) -> CorruptJournal:
    return CorruptJournal(path, offset, f"not an event this turnstile knows: {reason}")


def _torn(path: Path, contents: _Contents, size: int, done: str) -> str:
    what = "its header" if contents.end == 0 else "its last record"
    return (
        f"{path}: {what}, at byte {contents.end} ({size - contents.end} bytes), was cut short "
        f"by a crash: {done}"
    )


def _replay(spec: LoopSpec, contents: _Contents, path: Path) -> Loop:
    """`Loop.replay`, naming the record of an event the loop refuses (found, only then, as the
    shortest run of events the loop refuses)."""
    events = contents.events
    try:
        return Loop.replay(spec, events)
    except TurnstileError as e:
        refused = bisect.bisect_left(
            range(1, len(events) + 1), True, key=partial(_refuses, spec, events)
        )
        event = events[refused]
        raise CorruptJournal(
            path, contents.offsets[refused], f"the loop refuses this {type(event).__name__}: {e}"
        ) from e


def _refuses(spec: LoopSpec, events: list[Event], count: int) -> bool:
    try:
        Loop.replay(spec, events[:count])
    except TurnstileError:
        return True
    return False


def _read(path: Path) -> _Contents:
    data = path.read_bytes()
    contents = _scan(data, path)
    if contents.end < len(data):
        warnings.warn(
            _torn(path, contents, len(data), "ignored (opening it to append cuts it off)"),
            TornJournal,
            stacklevel=3,
        )
    return contents


def _fsync(fd: int) -> None:
    """Sync a file's data and what reading it back needs (its size), not its timestamps."""
    (os.fdatasync if hasattr(os, "fdatasync") else os.fsync)(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Journal:
    """An append-only file of a run's events, one record each; `events` holds them all.

    Every append hands its record to the OS at once, so whatever the policy a killed process
    loses nothing it appended. `fsync` decides what survives a power loss, and how many data
    syncs (`fdatasync`, or `fsync` where the OS has no other) a run pays:

    - `"always"`: every event (a sync per append, 5 a turn of two tool calls: the slowest).
    - `"batch"` (the default): every event appended before a `commit()`. Executors commit right
      before each effect (a tool call, a model call), so no intent is lost and no tool runs
      twice unless it is replay-safe; events after the last effect may be lost, and are redone.
      A turn of N tool calls: a sync before its model call and one before each call (one
      for them all where they start together).
    - `"round"`: one sync a turn where the tools allow it. Executors commit before each round
      of tool calls, every call's start in it, and not before a model call (asking again is
      harmless). A power loss can lose the last round's results and the model's reply after
      them: those calls are settled as after any crash (replay-safe ones run again, the others
      are answered as interrupted: each ran once, never twice). A call is recorded as started
      with the round only where a crash before it ran costs nothing: a concurrent executor
      starts the whole round at once; a sequential one (`sync`) records the replay-safe calls
      (run on resume if the crash came first) with the round's first call, and records and
      syncs each later call that is not replay-safe just before it runs, as `"batch"` (else a
      crash between two calls would answer it as interrupted without its ever running).
    - `"never"`: nothing is synced; what the OS had not written out yet is lost.

    Opening reads what the file holds (creating it, with its header, if absent): a torn tail is
    cut off with a `TornJournal` warning naming its offset, damage raises `CorruptJournal`. One
    process appends to a journal at a time. An append or sync that fails closes the journal,
    unless it could take the half-written record back: open it again to go on.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: Policy = "batch") -> None:
        if fsync not in get_args(Policy):
            raise ValueError(f"fsync must be 'always', 'batch', 'round' or 'never', not {fsync!r}")
        self.path = Path(path)
        self.fsync: str = fsync
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0))
        try:
            with open(fd, "rb", closefd=False) as f:
                data = f.read()
            contents = _scan(data, self.path)
            if contents.end < len(data):
                os.ftruncate(fd, contents.end)
                warnings.warn(
                    _torn(self.path, contents, len(data), "cut off"), TornJournal, stacklevel=2
                )
            size = contents.end
            if size == 0:
                _write_all(fd, _HEADER)
                size = len(_HEADER)
            if size != len(data) and fsync != "never":
                _fsync(fd)
                if contents.end == 0:
                    self._sync_folder()
        except BaseException:
            os.close(fd)
            raise
        self.events = contents.events
        self.header = contents.header
        """A fork's header record (what names its parent), as JSON; None for other runs."""
        self._offsets = contents.offsets
        self._fd = fd
        self._size = size
        self._unsynced = False

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r}, fsync={self.fsync!r}, events={len(self.events)})"

    def append(self, event: Event) -> None:
        """Write `event` as one record; with `fsync="always"`, durable before this returns."""
        if type(event) not in _EVENTS:
            raise TypeError(f"a journal holds events, not {type(event).__name__}")
        fd = self._fd if self._fd >= 0 else self._open()
        payload = _encode(event)
        length = len(payload)
        record = _FRAME.pack(length, crc32(_LENGTH.pack(length)), crc32(payload)) + payload
        try:
            written = os.write(fd, record)  # all of it, but for a signal or a full disk
            if written < len(record):
                _write_all(fd, memoryview(record)[written:])
        except BaseException:
            try:  # no half record may stay before the next one
                os.ftruncate(fd, self._size)
            except OSError:
                self._shut()
            raise
        self.events.append(event)
        self._offsets.append(self._size)
        self._size += len(record)
        self._unsynced = True
        if self.fsync == "always":
            self._sync()

    def commit(self) -> None:
        """Make every appended record durable, as the policy allows: a data sync (when something
        is new) unless the policy is "never" (the OS already has them)."""
        self._open()
        if self._unsynced and self.fsync != "never":
            self._sync()

    def close(self) -> None:
        """Commit, then close the file; closing again does nothing."""
        if self._fd < 0:
            return
        try:
            self.commit()
        finally:
            self._shut()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def loop(self, spec: LoopSpec) -> Loop:
        """The loop its events rebuild (`Loop.replay`); an event the loop refuses raises
        `CorruptJournal` naming its record."""
        return _replay(spec, _Contents(self.events, self._offsets, self._size), self.path)

    @staticmethod
    def read(path: str | os.PathLike[str]) -> list[Event]:
        """The events of the journal at `path`, never writing to it: a torn tail is warned
        about (`TornJournal`) and left; damage raises `CorruptJournal`."""
        return _read(Path(path)).events

    @staticmethod
    def replay(path: str | os.PathLike[str], spec: LoopSpec) -> Loop:
        """The loop the journal at `path` rebuilds, never writing to it: as `read`, and an
        event the loop refuses raises `CorruptJournal` naming its record."""
        path = Path(path)
        return _replay(spec, _read(path), path)

    def _open(self) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.path}: the journal is closed")
        return self._fd

    def _sync(self) -> None:
        try:
            _fsync(self._fd)
        except OSError:  # the OS may have dropped what it could not write: trust nothing since
            self._shut()
            raise
        self._unsynced = False

    def _shut(self) -> None:
        fd, self._fd = self._fd, -1
        os.close(fd)

    def _sync_folder(self) -> None:
        """Make the new file's name durable too (POSIX: Windows cannot open a folder). A
        folder's entries take `fsync` (`fdatasync` promises a file's data only); it comes
        once, when the journal is created."""
        if os.name == "posix":
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
