"""The journal: an append-only file of events that a crash may cut anywhere, where damage is
never taken for a crash."""

from __future__ import annotations

import os
import struct
import tempfile
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from turnstile.core import (
    Event,
    Loop,
    LoopSpec,
    ModelReplied,
    Started,
    Tick,
    ToolReturned,
    ToolSpec,
    ToolStarted,
    TurnstileError,
)
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage, UserMessage
from turnstile.executors import CorruptJournal, Journal, TornJournal

from tests.core._scripts import Run, drive, specs

SPEC = LoopSpec(tools=(ToolSpec("lookup"),))
MAGIC = b"turnstile-journal\n"  # the documented header: this, then the schema version (u32 LE)
HEADER = len(MAGIC) + 4
FRAME = 12  # length (u32), crc32 of the length (u32), crc32 of the payload (u32)


def short_run() -> tuple[Loop, list[Event]]:
    """A turn with a call that starts and returns, then the answer."""
    loop = Loop(SPEC)
    [ask] = loop.start("which is warmer?", 0.0)
    reply = ModelResponse(
        [Text("let me look"), ToolCall("c1", "lookup", {"city": "北京"})],
        ModelStop.tool_use,
        Usage(50, 8),
    )
    [run] = loop.send(ModelReplied(ask.id, reply, now=1.0))
    loop.send(ToolStarted(run.id, now=1.5))
    [ask] = loop.send(ToolReturned(run.id, "26°C", now=2.0))
    loop.send(ModelReplied(ask.id, ModelResponse([Text("上海")], ModelStop.end_turn), now=3.0))
    return loop, list(loop.state.events)


def written(path: Path, events: list[Event]) -> list[int]:
    """Write `events` to a new journal at `path`; where each record ends (the header first)."""
    ends = []
    with Journal(path, fsync="never") as journal:
        ends.append(path.stat().st_size)
        for event in events:
            journal.append(event)
            ends.append(path.stat().st_size)
    return ends


@contextmanager
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        yield found


def record(payload: bytes) -> bytes:
    length = struct.pack("<I", len(payload))
    return length + struct.pack("<II", zlib.crc32(length), zlib.crc32(payload)) + payload


# -- reading and writing ---------------------------------------------------------------------


def test_a_journal_holds_the_events_appended_and_replays_to_the_live_loop(tmp_path: Path) -> None:
    live, events = short_run()
    path = tmp_path / "run.journal"
    ends = written(path, events)
    assert ends[0] == HEADER and path.read_bytes().startswith(MAGIC + struct.pack("<I", 1))
    assert Journal.read(path) == events
    with Journal(path) as journal:
        assert journal.events == events
        assert journal.loop(SPEC).dump() == live.dump()
        assert journal.path == path and journal.fsync == "batch"


def test_appending_after_reopening_goes_on_where_the_journal_ended(tmp_path: Path) -> None:
    _, events = short_run()
    path = tmp_path / "run.journal"
    written(path, events[:2])
    with Journal(path) as journal:
        for event in events[2:]:
            journal.append(event)
    assert Journal.read(path) == events


def test_an_empty_file_is_a_journal_with_no_events(tmp_path: Path) -> None:
    """What a crash between creating the file and writing its header leaves."""
    path = tmp_path / "run.journal"
    path.write_bytes(b"")
    with caught() as found:
        assert Journal.read(path) == []
        assert path.read_bytes() == b""
        with Journal(path) as journal:
            assert journal.events == []
    assert found == []
    assert path.read_bytes() == MAGIC + struct.pack("<I", 1)


# -- a crash can cut the file anywhere -------------------------------------------------------


def test_a_journal_cut_at_any_byte_opens_with_its_whole_records(tmp_path: Path) -> None:
    _, events = short_run()
    path = tmp_path / "run.journal"
    ends = written(path, events)
    data = path.read_bytes()
    for cut in range(len(data) + 1):
        torn = tmp_path / f"cut-{cut}.journal"
        torn.write_bytes(data[:cut])
        whole = sum(end <= cut for end in ends[1:])
        kept = max([0, *(end for end in ends if end <= cut)])
        was_cut = cut != kept
        with caught() as found:
            assert Journal.read(torn) == events[:whole]
        assert torn.read_bytes() == data[:cut], "reading never writes"
        assert [w.category for w in found] == ([TornJournal] if was_cut else []), cut
        if was_cut:
            assert f"byte {kept}" in str(found[0].message) and str(torn) in str(found[0].message)
        with caught() as found:
            journal = Journal(torn, fsync="never")
        assert [w.category for w in found] == ([TornJournal] if was_cut else []), cut
        assert journal.events == events[:whole]
        assert torn.read_bytes() == data[: max(kept, HEADER)], "cut back to its whole records"
        if whole < len(events):
            journal.append(events[whole])
        journal.close()
        with caught() as found:
            assert Journal.read(torn) == events[: whole + 1]
        assert found == []


def test_zero_bytes_a_power_loss_leaves_past_the_end_are_a_torn_tail(tmp_path: Path) -> None:
    _, events = short_run()
    path = tmp_path / "run.journal"
    ends = written(path, events)
    data = path.read_bytes()
    for tail, kept in [
        (data + bytes(100), len(events)),  # the file grew, its last blocks never written
        (data[: ends[-2] + FRAME] + bytes(ends[-1] - ends[-2] - FRAME), len(events) - 1),
    ]:
        path.write_bytes(tail)
        with caught() as found:
            assert Journal(path).events == events[:kept]
        assert [w.category for w in found] == [TornJournal]
        assert path.stat().st_size == ends[kept]


def test_a_process_killed_while_appending_leaves_a_journal_a_new_process_opens(
    tmp_path: Path,
) -> None:
    import signal
    import subprocess
    import sys

    path = tmp_path / "run.journal"
    writer = (
        "import sys\n"
        "from turnstile.core import Tick\n"
        "from turnstile.executors import Journal\n"
        "journal = Journal(sys.argv[1], fsync='never')\n"
        "print(len(journal.events), flush=True)\n"
        "i = len(journal.events)\n"
        "while True:\n"
        "    journal.append(Tick(now=float(i)))\n"
        "    i += 1\n"
    )
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", writer, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        child.stdout.readline()  # it has opened the journal and is appending
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        events = Journal(path, fsync="never").events
        assert events == [Tick(now=float(i)) for i in range(len(events))]


# -- damage is never cut off -----------------------------------------------------------------


def test_damage_before_the_last_record_is_corrupt_naming_its_offset(tmp_path: Path) -> None:
    _, events = short_run()
    path = tmp_path / "run.journal"
    ends = written(path, events)
    data = path.read_bytes()
    starts = [0, len(MAGIC), *ends]  # the magic, the schema version, then each record
    for i in range(ends[-2]):
        damaged = bytearray(data)
        damaged[i] ^= 0x41
        path.write_bytes(damaged)
        with pytest.raises(CorruptJournal) as read:
            Journal.read(path)
        offset = max(s for s in starts if s <= i)
        assert (read.value.offset, read.value.path) == (offset, path), i
        assert f"byte {offset}" in str(read.value)
        with pytest.raises(CorruptJournal):
            Journal(path)
        assert path.read_bytes() == damaged, "a damaged journal is left as it is"


def test_in_the_last_record_a_bad_checksum_is_torn_but_a_bad_length_is_damage(
    tmp_path: Path,
) -> None:
    """A length that fails its own check says nothing of where the record ends, so nothing
    after it can be called the end of the file."""
    _, events = short_run()
    path = tmp_path / "run.journal"
    ends = written(path, events)
    data = path.read_bytes()
    last = ends[-2]
    for i in range(last, len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x41
        path.write_bytes(damaged)
        if i < last + 8:
            with pytest.raises(CorruptJournal) as error:
                Journal.read(path)
            assert error.value.offset == last
        else:
            with caught() as found:
                assert Journal.read(path) == events[:-1]
            assert [w.category for w in found] == [TornJournal]


def test_a_whole_record_that_is_no_event_is_corrupt_even_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    ends = written(path, [Tick(now=1.0)])
    with path.open("ab") as f:
        f.write(record(b'{"type":"sleep","now":2.0}'))
    with pytest.raises(CorruptJournal) as error:
        Journal.read(path)
    assert error.value.offset == ends[-1] and "not an event" in str(error.value)


@pytest.mark.parametrize(
    ("content", "offset", "message"),
    [
        (b'{"schema": 2, "state": {}}', 0, "not a turnstile journal"),
        (b"{}", 0, "not a turnstile journal"),
        (MAGIC + struct.pack("<I", 3), len(MAGIC), "newer"),
        (MAGIC + struct.pack("<I", 0), len(MAGIC), "schema 0"),
    ],
)
def test_a_file_that_is_no_journal_of_ours_is_corrupt_and_left_alone(
    tmp_path: Path, content: bytes, offset: int, message: str
) -> None:
    path = tmp_path / "run.journal"
    path.write_bytes(content)
    for open_ in (Journal.read, Journal):
        with pytest.raises(CorruptJournal) as error:
            open_(path)
        assert isinstance(error.value, TurnstileError)
        assert error.value.offset == offset and message in str(error.value)
    assert path.read_bytes() == content


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"tick","now":1.0,"extra":' + b"[" * 3000 + b"]" * 3000 + b"}",
        b'{"type":"started","now":0.0,"messages":[],"tools":[{"name":"f","parameters":'
        + b'{"a":' * 3000,
        b"[" * 3000,
    ],
)
def test_a_record_nested_thousands_deep_is_corrupt_naming_its_offset(
    tmp_path: Path, payload: bytes
) -> None:
    path = tmp_path / "run.journal"
    ends = written(path, [Tick(now=0.5)])
    with path.open("ab") as f:
        f.write(record(payload))
    for open_ in (Journal.read, Journal, lambda p: Journal.replay(p, SPEC)):
        with pytest.raises(CorruptJournal) as error:
            open_(path)
        assert error.value.offset == ends[-1]


def test_a_record_of_ten_megabytes_is_read_back(tmp_path: Path) -> None:
    _, events = short_run()
    big = "x" * 10_000_000
    events = [replace(e, content=big) if type(e) is ToolReturned else e for e in events]
    path = tmp_path / "run.journal"
    written(path, events)
    assert Journal.read(path) == events
    assert Journal.replay(path, SPEC).state.events == events


def test_an_event_the_loop_refuses_on_replay_names_its_record(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    ends = written(path, [Started([UserMessage("hi")], now=0.0), ToolReturned("ghost", "x", now=1)])
    with Journal(path) as journal, pytest.raises(CorruptJournal) as error:
        journal.loop(SPEC)
    assert error.value.offset == ends[1] and "ToolReturned" in str(error.value)


# -- the API's edges -------------------------------------------------------------------------


def test_only_events_are_appended_and_only_known_policies_taken(tmp_path: Path) -> None:
    path = tmp_path / "run.journal"
    with pytest.raises(ValueError, match="fsync"):
        Journal(path, fsync="sometimes")  # type: ignore[arg-type]
    with Journal(path) as journal, pytest.raises(TypeError, match="UserMessage"):
        journal.append(UserMessage("hi"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="closed"):
        journal.append(Tick(now=0.0))
    journal.close()  # again: nothing to do
    assert Journal.read(path) == []


# -- what each policy makes durable, and failures on the way ---------------------------------


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fsync of a file's data from now on (either call the OS offers)."""
    calls: list[int] = []
    for name in ("fsync", "fdatasync"):
        if hasattr(os, name):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, lambda fd, real=real: (calls.append(fd), real(fd))[1])
    return calls


@pytest.mark.parametrize(
    ("policy", "per_append", "per_commit"), [("always", 1, 0), ("batch", 0, 1), ("never", 0, 0)]
)
def test_each_policy_fsyncs_when_it_says(
    tmp_path: Path, syncs: list[int], policy: str, per_append: int, per_commit: int
) -> None:
    path = tmp_path / "run.journal"
    Journal(path).close()
    syncs.clear()
    journal = Journal(path, fsync=policy)  # type: ignore[arg-type]
    assert syncs == []
    for i in range(3):
        journal.append(Tick(now=float(i)))
    assert len(syncs) == 3 * per_append
    journal.commit()
    journal.commit()  # nothing new since
    assert len(syncs) == 3 * per_append + per_commit
    journal.close()
    assert len(syncs) == 3 * per_append + per_commit


@pytest.mark.skipif(not hasattr(os, "fdatasync"), reason="the OS has no fdatasync")
@pytest.mark.parametrize("policy", ["always", "batch", "round"])
def test_records_are_made_durable_by_fdatasync_never_by_a_full_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """A record's data and the size to read it back are all a sync need keep: `fdatasync`,
    not `fsync`, which writes the file's timestamps out as well."""
    path = tmp_path / "run.journal"
    Journal(path).close()
    calls: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(
            os, name, lambda fd, name=name, real=real: (calls.append(name), real(fd))[1]
        )
    with Journal(path, fsync=policy) as journal:  # type: ignore[arg-type]
        journal.append(Tick(now=0.0))
        journal.commit()
        journal.append(Tick(now=1.0))
    assert calls and set(calls) == {"fdatasync"}


def test_a_new_journal_is_durable_with_its_name(tmp_path: Path, syncs: list[int]) -> None:
    Journal(tmp_path / "run.journal").close()
    assert len(syncs) == (2 if os.name == "posix" else 1)  # the file, then its folder


def test_a_write_that_fails_halfway_takes_its_half_record_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.journal"
    journal = Journal(path, fsync="never")
    journal.append(Tick(now=0.0))
    size = path.stat().st_size
    real = os.write

    def full(fd: int, data: bytes) -> int:
        real(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        journal.append(Tick(now=1.0))
    monkeypatch.setattr(os, "write", real)
    assert path.stat().st_size == size and journal.events == [Tick(now=0.0)]
    journal.append(Tick(now=2.0))
    journal.close()
    with caught() as found:
        assert Journal.read(path) == [Tick(now=0.0), Tick(now=2.0)]
    assert found == []


def test_a_failed_fsync_closes_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync the OS may have dropped pages it could not write, and a second fsync
    can succeed without them: only reading the file again says what it holds."""
    path = tmp_path / "run.journal"
    journal = Journal(path)
    journal.append(Tick(now=0.0))

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, broken, raising=False)
    with pytest.raises(OSError, match="Input/output"):
        journal.commit()
    monkeypatch.undo()
    with pytest.raises(ValueError, match="closed"):
        journal.append(Tick(now=1.0))
    journal.close()
    assert Journal(path).events == [Tick(now=0.0)]


# -- any run, any point ----------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(data=st.data(), spec=specs())
def test_a_journal_written_as_a_run_goes_replays_to_the_live_loop_at_any_point(
    data: st.DataObject, spec: LoopSpec
) -> None:
    """Each event goes to the journal as the loop records it; at random points reading the
    journal back (or reopening it and going on) gives a loop whose dump is the live loop's."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.journal"
        policy = data.draw(st.sampled_from(["never", "batch"]))
        journal = Journal(path, fsync=policy)
        written = 0

        def record(run: Run) -> None:
            nonlocal journal, written
            events = run.state.events
            for event in events[written:]:
                journal.append(event)
            written = len(events)
            check = data.draw(st.integers(0, 7))
            if check == 0:
                assert Loop.replay(spec, Journal.read(path)).dump() == run.loop.dump()
            elif check == 1:
                journal.close()
                journal = Journal(path, fsync=policy)
                assert journal.loop(spec).dump() == run.loop.dump()
            elif check == 2:
                journal.commit()

        run = drive(data, Run(spec), on_step=record)
        record(run)
        journal.close()
        assert Journal(path).loop(spec).dump() == run.loop.dump()
        assert Journal.read(path) == run.state.events


def test_a_forks_header_record_is_read_and_a_damaged_one_is_corrupt(tmp_path: Path) -> None:
    header = b'{"path":null,"run":"","index":0,"digest":""}'
    length = struct.pack("<I", len(header))
    record = struct.pack("<III", len(header), zlib.crc32(length), zlib.crc32(header)) + header
    path = tmp_path / "fork.journal"
    path.write_bytes(MAGIC + struct.pack("<I", 2) + record)
    with Journal(path) as journal:
        assert journal.header == header and journal.events == []
        journal.append(Tick(now=1.0))
    assert Journal.read(path) == [Tick(now=1.0)]
    path.write_bytes(MAGIC + struct.pack("<I", 2) + record[:-1])
    with pytest.raises(CorruptJournal, match="damaged header record"):
        Journal.read(path)
