"""`Workspace`: a work directory that lasts a run, with a snapshot after every call.

The store's layout, under its root (every part the host's own, never the calls'):

    objects/<sha256>        a file's contents, written once (content-addressed, read-only)
    rounds/<round>/<seq>-<call>   a snapshot: the manifest of the tree after that call
    live/<round>.<seq>-<call>     a tree left in that snapshot's state, ready to go on from
    work/<run>              the tree a call of the run works in (its cwd, at a stable path)

A snapshot is keyed by the run's history, never by a name the caller gives: `<round>` is a
digest of the events up to the model reply that asked for the call (their times aside, but
the run's start), so a fork shares its parent's rounds up to where it differs, and a resumed
run its own. Before a call the tree is put in the state its history says: the newest snapshot
of a call whose result the history holds (or which this process ran in the current round and
has yet to see recorded), walking back round by round; the tree left by the last call is
taken over if it is in that state, else one is built from the snapshot. So a fork's calls find
the files as its history left them, and a run resumed after kill -9 finds them as of its last
recorded result: a snapshot is written before `run` returns the call's outcome, hence before
the executor journals it, and a call whose result was never journaled does not count.

The host walks a tree only once every process of the call is gone, through directory handles
opened with O_NOFOLLOW: a symlink is kept as a symlink (its target as text), never followed;
anything but directories, regular files and symlinks (a fifo, a socket) is deleted unopened;
what the call took its owner's rights on gets them back; with a uid per call, the tree is the
call's while it runs and the host's again afterwards. Calls on a store go one at a time (a
lock in the process, `flock` on the store across processes), the calls of a round in turn.
"""

from __future__ import annotations

__all__ = ["Workspace", "kept"]

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec
from turnstile.core import (
    Approved,
    Denied,
    Event,
    ModelReplied,
    Started,
    ToolContext,
    ToolOutcome,
    ToolReturned,
)

from ._limits import MiB, SandboxLimits, size
from ._wire import write_all
from ._workdir import _open, remove

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DEPTH = 64
_BYTES_PER_FILE = 4096  # as the call's own tmpfs: one file per 4 KiB of `disk_bytes`
_encode = msgspec.json.Encoder().encode


class _Entry(msgspec.Struct, array_like=True, frozen=True):
    """One thing in a tree: "d" a directory, "f" a file (`data` its digest), "l" a symlink
    (`data` its target); `path` relative to the tree's top, parents before children."""

    path: str
    kind: str
    mode: int
    data: str = ""
    size: int = 0


class _Manifest(msgspec.Struct, frozen=True):
    call_id: str
    entries: list[_Entry]


_decode_manifest = msgspec.json.Decoder(_Manifest).decode


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(call_id: str) -> str:
    return _digest(call_id.encode())[:16]


def _rounds(events: Sequence[Event]) -> tuple[str, list[tuple[str, list[str]]]]:
    """The run's anchor (its first start, time included: two runs of one prompt differ), and
    each round: the digest of the history up to its model reply, and the calls it returned."""
    history = hashlib.sha256()
    anchor = ""
    rounds: list[tuple[str, list[str]]] = []
    for event in events:
        kind = type(event)
        if kind is Started:
            history.update(_encode(event))
            anchor = anchor or history.hexdigest()[:24]
        elif kind is ModelReplied:
            assert isinstance(event, ModelReplied)
            history.update(_encode([event.command_id, event.response.content]))
            rounds.append((history.hexdigest()[:32], []))
        elif kind is ToolReturned or kind is Approved or kind is Denied:
            history.update(_encode(msgspec.structs.replace(event, now=0.0)))  # type: ignore[type-var]
            if kind is ToolReturned and rounds:
                rounds[-1][1].append(event.call_id)  # type: ignore[union-attr]
    return anchor, rounds


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _walk(top: int, at: str = "", depth: int = 0) -> Iterator[tuple[str, os.stat_result, int]]:
    """Each directory, regular file and symlink below the directory `top`, with its lstat and
    the handle of the directory holding it; directories are entered by handle, never by path
    (one the call made unreadable is given back its owner's rights). Anything else (a fifo,
    a socket) is deleted unopened: a workspace keeps none."""
    if depth > _DEPTH:
        raise _OverLimit(f"its limit of {_DEPTH} levels of directories")
    with os.scandir(top) as entries:
        found = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
    for name, info in sorted(found):
        path = f"{at}{name}"
        if stat.S_ISDIR(info.st_mode):
            yield path, info, top
            below = _open(name, top)
            try:
                yield from _walk(below, path + "/", depth + 1)
            finally:
                os.close(below)
        elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
            yield path, info, top
        else:
            os.unlink(name, dir_fd=top)


class _OverLimit(Exception):
    pass


class _Kept(NamedTuple):
    """A call's work dir (`path`; "" for one of its own) and what to do with its outcome."""

    path: str
    snapshot: Callable[[ToolOutcome], ToolOutcome]


_NOT_KEPT = _Kept("", lambda outcome: outcome)


@contextlib.contextmanager
def kept(
    workspace: Workspace | None,
    history: Sequence[Event] | None,
    context: ToolContext | None,
    limits: SandboxLimits,
    uid: int | None,
) -> Iterator[_Kept]:
    """The call's work dir in `workspace`, for the run `history` is of (none without one)."""
    if workspace is None:
        yield _NOT_KEPT
        return
    if history is None or context is None:
        raise ValueError("a workspace needs the run's history: run it with sync or aio")
    with workspace.call(list(history), context.call_id, limits, uid) as place:
        yield place


class Workspace:
    """A store on the host (`root`, made if missing) of work directories that last a run: give
    it to `Sandbox(..., workspace=)`, and each call of a run works in the run's own directory
    (its cwd, HOME and TMPDIR), writable, with the files the run's earlier calls left. After
    each call the directory is snapshotted (content-addressed: a file unchanged since the last
    snapshot costs a stat), keyed by the run's history, so that a fork of the run (`fork(...,
    at=)`) finds the files as they were at its point and a run resumed after a crash as of its
    last recorded result. The executor hands the sandbox that history (`sync` and `aio` do).

    The sandbox's `SandboxLimits.disk_bytes` caps the directory (and one file per 4 KiB of it),
    checked when a call ends; `snapshot_bytes` caps the store's file contents together. A call
    past either gets an `is_error` outcome naming the limit, and the directory is put back as
    it was before the call. Only directories, regular files and symlinks are kept.
    """

    def __init__(self, root: str | os.PathLike[str], *, snapshot_bytes: int = 1024 * MiB) -> None:
        if snapshot_bytes <= 0:
            raise ValueError("Workspace.snapshot_bytes must be positive")
        self.root = Path(root).absolute()
        self.snapshot_bytes = snapshot_bytes
        for part in ("objects", "rounds", "live", "work"):
            (self.root / part).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending: dict[str, set[str]] = {}  # per round, the snapshots made here
        self._stored: int | None = None  # the objects' bytes, counted once
        self._known: dict[tuple[int, ...], str] = {}  # a file's identity and times: its digest

    # -- the store -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        with self._lock:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _snapshots(self, round_key: str) -> list[str]:
        try:
            names = os.listdir(self.root / "rounds" / round_key)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if not n.startswith("."))

    def _target(self, events: Sequence[Event]) -> tuple[str, str, str | None]:
        """The run's anchor, its current round, and the snapshot its history says its files
        are in ("<round>/<name>"; None: none yet, an empty tree)."""
        anchor, rounds = _rounds(events)
        if not rounds:
            raise ValueError("a workspace call comes from a model reply: the history has none")
        current = rounds[-1][0]
        for round_key, returned in reversed(rounds):
            keys = {_key(c) for c in returned}
            mine = self._pending.get(round_key, set()) if round_key == current else set()
            names = [n for n in self._snapshots(round_key) if n[7:] in keys or n in mine]
            if names:
                return anchor, current, f"{round_key}/{names[-1]}"
        return anchor, current, None

    def _manifest(self, snapshot: str) -> _Manifest:
        return _decode_manifest((self.root / "rounds" / snapshot).read_bytes())

    def _build(self, snapshot: str | None, path: Path) -> None:
        """A fresh tree at `path` holding `snapshot`'s files (made here: nothing in it to
        follow), each a copy of its object."""
        os.mkdir(path, 0o700)
        if snapshot is None:
            return
        made = {""}  # the directories made so far: an entry goes in one of them, or none
        for entry in self._manifest(snapshot).entries:
            above, _, name = entry.path.rpartition("/")
            if above not in made or name in ("", ".", "..") or "\0" in entry.path:
                raise ValueError(f"a snapshot names {entry.path!r}")
            target = path / entry.path
            if entry.kind == "d":
                os.mkdir(target, 0o700)
                made.add(entry.path)
            elif entry.kind == "l":
                os.symlink(entry.data, target)
                continue
            else:
                source = os.open(self.root / "objects" / entry.data, _FILE)
                copy = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    while os.copy_file_range(source, copy, 1 << 30):
                        pass
                    os.fchmod(copy, entry.mode)
                    self._learn(os.fstat(copy), entry.data)
                finally:
                    os.close(copy)
                    os.close(source)
                continue
            os.chmod(target, entry.mode)

    def _checkout(self, anchor: str, snapshot: str | None) -> Path:
        """The run's work tree, in `snapshot`'s state: the tree left there taken over, or built."""
        work = self.root / "work" / anchor
        if os.path.lexists(work) and not remove(str(work)):
            raise OSError(f"cannot clear the workspace's tree {work}")
        if snapshot is not None:
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.root / "live" / snapshot.replace("/", "."), work)
                return work
        self._build(snapshot, work)
        return work

    def _store(self, data: bytes) -> str:
        digest = _digest(data)
        path = self.root / "objects" / digest
        if not path.exists():
            if self._stored is None:
                self._stored = sum(p.stat().st_size for p in (self.root / "objects").iterdir())
            if self._stored + len(data) > self.snapshot_bytes:
                raise _OverLimit(f"its snapshots' limit of {size(self.snapshot_bytes)}")
            fd, temporary = tempfile.mkstemp(dir=self.root / "objects")
            try:
                write_all(fd, data)
                os.fchmod(fd, 0o400)
            finally:
                os.close(fd)
            os.replace(temporary, path)
            self._stored += len(data)
        return digest

    def _measure(self, top: int, limits: SandboxLimits) -> None:
        """`_OverLimit` if the tree holds more than the call's limits allow."""
        total = files = 0
        most_files = max(limits.disk_bytes // _BYTES_PER_FILE, 64)
        for _, info, _ in _walk(top):
            files += 1
            total += info.st_size if stat.S_ISREG(info.st_mode) else 0
            if files > most_files:
                raise _OverLimit(f"its limit of {most_files} files (SandboxLimits.disk_bytes)")
            if total > limits.disk_bytes:
                raise _OverLimit(
                    f"its limit of {size(limits.disk_bytes)} (SandboxLimits.disk_bytes)"
                )

    def _snapshot(self, tree: Path, call_id: str, limits: SandboxLimits) -> _Manifest:
        """The tree's manifest, its new contents stored; `_OverLimit` past the call's limits
        (measured first: nothing is stored then)."""
        entries: list[_Entry] = []
        top = os.open(tree, _DIR)
        try:
            self._measure(top, limits)
            for path, info, parent in _walk(top):
                name = path.rpartition("/")[2]
                if stat.S_ISLNK(info.st_mode):
                    entries.append(_Entry(path, "l", 0, os.readlink(name, dir_fd=parent)))
                    continue
                mode = stat.S_IMODE(info.st_mode)
                owner = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
                mine = stat.S_ISDIR(info.st_mode) or info.st_nlink == 1  # a hard-linked file
                if mode | owner != mode and mine:  # is not ours to change (and lstat said:
                    os.chmod(name, mode | owner, dir_fd=parent)  # no symlink to follow)
                    info = os.lstat(name, dir_fd=parent)
                mode |= owner
                if stat.S_ISDIR(info.st_mode):
                    entries.append(_Entry(path, "d", mode))
                else:
                    digest = self._known.get(_identity(info)) or self._read(name, parent)
                    entries.append(_Entry(path, "f", mode, digest, info.st_size))
        finally:
            os.close(top)
        return _Manifest(call_id, entries)

    def _read(self, name: str, parent: int) -> str:
        """Store the file `name` in the directory `parent` (opened without following a link,
        nor waiting on a fifo); its digest, known from then on by its identity and times."""
        fd = os.open(name, _FILE, dir_fd=parent)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(f"{name} is no longer a regular file")
            data = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
            digest = self._store(data)
        finally:
            os.close(fd)
        self._learn(info, digest)
        return digest

    def _learn(self, info: os.stat_result, digest: str) -> None:
        """Remember `digest` for the file `info` describes: unchanged (the same inode, size,
        change and modification times: no write leaves its ctime), it is not read again."""
        if len(self._known) > 100_000:
            self._known.clear()
        self._known[_identity(info)] = digest

    def _record(self, round_key: str, manifest: _Manifest) -> str:
        """Write `manifest` as the round's next snapshot; its "<round>/<name>"."""
        folder = self.root / "rounds" / round_key
        folder.mkdir(mode=0o700, exist_ok=True)
        names = self._snapshots(round_key)
        seq = int(names[-1][:6]) + 1 if names else 1
        name = f"{seq:06d}-{_key(manifest.call_id)}"
        temporary = folder / f".{name}"
        temporary.write_bytes(_encode(manifest))
        os.rename(temporary, folder / name)
        self._pending.setdefault(round_key, set()).add(name)
        return f"{round_key}/{name}"

    # -- what the sandbox asks -------------------------------------------------------------

    @contextlib.contextmanager
    def call(
        self, events: Sequence[Event], call_id: str, limits: SandboxLimits, uid: int | None
    ) -> Iterator[_Kept]:
        """The tree of the run whose history is `events` (up to the call), put in the state
        that history says and owned by `uid` if given, for the call to work in; the store
        held until the call's outcome is `snapshot`."""
        with self._held():
            anchor, current, snapshot = self._target(events)
            tree = self._checkout(anchor, snapshot)
            if uid is not None:
                self._give(tree, uid, uid)
            yield _Kept(
                str(tree), lambda out: self._after(tree, current, call_id, limits, uid, out)
            )

    def _after(
        self,
        tree: Path,
        current: str,
        call_id: str,
        limits: SandboxLimits,
        uid: int | None,
        outcome: ToolOutcome,
    ) -> ToolOutcome:
        """Snapshot the tree after a call (every process of which is gone), or, past a limit,
        drop it (the next call builds it again as it was) and fail the call."""
        try:
            made = self._record(current, self._snapshot(tree, call_id, limits))
        except _OverLimit as e:
            remove(str(tree))
            message = f"the call wrote past {e} into its workspace, which is as it was before"
            return ToolOutcome(message, True)
        if uid is not None:
            self._give(tree, os.geteuid(), os.getegid())
        os.rename(tree, self.root / "live" / made.replace("/", "."))
        return outcome

    def _give(self, tree: Path, uid: int, gid: int) -> None:
        """Give the tree to `uid` (a call's, or back to the host's once the call is done: no
        file is left owned by a uid the pool hands out again), keeping what is known of its
        files' contents."""
        top = os.open(tree, _DIR)
        try:
            os.chown(top, uid, gid)
            for path, info, parent in _walk(top):
                name = path.rpartition("/")[2]
                os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
                if (digest := self._known.get(_identity(info))) is not None:
                    self._learn(os.stat(name, dir_fd=parent, follow_symlinks=False), digest)
        finally:
            os.close(top)

    def files(self, events: Sequence[Event]) -> Path:
        """The directory holding the files as the run whose history is `events` (a run's
        `loop.state.events`) left them, until the run's next call; read it, do not change it
        (its symlinks are the calls': do not follow them on the host)."""
        with self._held():
            anchor, _, snapshot = self._target(events)
            if snapshot is None:
                return self._checkout(anchor, None)
            live = self.root / "live" / snapshot.replace("/", ".")
            if not live.exists():
                self._build(snapshot, live)
            return live
