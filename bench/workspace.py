"""What a sandbox workspace's snapshot costs: the tree of 100 files of 10 KB a call left,
snapshotted (`Workspace.call`'s end: walked, hashed, new contents stored), first whole and
then with one file changed, against a plain copy of the same tree (`shutil.copytree`), and
building the tree again from a snapshot (what a fork or a resume does) against the same copy;
interleaved in the same run. Bytes are what each adds to the disk."""

from __future__ import annotations

__all__ = ["rows"]

import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from turnstile.core import ModelReplied, Started, ToolOutcome
from turnstile.core.messages import ModelResponse, ModelStop, ToolCall, Usage, UserMessage
from turnstile.executors.sandbox import SandboxLimits, Workspace

from ._measure import Figure

Row = tuple[str, str, str, str, str]
FILES, SIZE = 100, 10 * 1024
LIMITS = SandboxLimits()


def _history(n: int) -> list:  # type: ignore[type-arg]
    reply = ModelResponse([ToolCall(f"c{n}", "t", {})], ModelStop.tool_use, Usage(1, 1))
    return [Started([UserMessage(f"run {n}")], now=0.0), ModelReplied("m", reply, now=0.0)]


def _used(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def _snapshot(where: Path, n: int, change: int) -> tuple[float, int]:
    """A store whose run's tree holds the files; snapshot it once, then time the snapshot
    after `change` files changed (all of them: `FILES`). Returns ms and bytes added."""
    store = Workspace(where / f"store-{n}")
    history = _history(n)
    with store.call(history, "c0", LIMITS, None) as kept:
        for i in range(FILES):
            Path(kept.path, f"f{i}").write_bytes(os.urandom(SIZE))
        if change == FILES:
            before = _used(store.root)
            start = time.perf_counter()
            kept.snapshot(ToolOutcome("ok"))
            return (time.perf_counter() - start) * 1e3, _used(store.root) - before
        kept.snapshot(ToolOutcome("ok"))
    with store.call(history, "c1", LIMITS, None) as kept:
        for i in range(change):
            Path(kept.path, f"f{i}").write_bytes(os.urandom(SIZE))
        before = _used(store.root)
        start = time.perf_counter()
        kept.snapshot(ToolOutcome("ok"))
        return (time.perf_counter() - start) * 1e3, _used(store.root) - before


def _restore(where: Path, n: int) -> tuple[float, int]:
    """Build the tree of a snapshot no tree is left in (a fork's first call)."""
    store = Workspace(where / f"restore-{n}")
    history = _history(n)
    with store.call(history, "c0", LIMITS, None) as kept:
        for i in range(FILES):
            Path(kept.path, f"f{i}").write_bytes(os.urandom(SIZE))
        kept.snapshot(ToolOutcome("ok"))
    shutil.rmtree(store.root / "live")
    (store.root / "live").mkdir()
    start = time.perf_counter()
    path = store.files(history)
    return (time.perf_counter() - start) * 1e3, _used(path)


def _copy(where: Path, n: int) -> tuple[float, int]:
    source = where / f"tree-{n}"
    source.mkdir()
    for i in range(FILES):
        (source / f"f{i}").write_bytes(os.urandom(SIZE))
    start = time.perf_counter()
    shutil.copytree(source, where / f"copy-{n}")
    return (time.perf_counter() - start) * 1e3, _used(where / f"copy-{n}")


def rows(sizes: list[int], times: int) -> list[Row]:
    measures: dict[str, Callable[[Path, int], tuple[float, int]]] = {
        "whole": lambda w, n: _snapshot(w, n, FILES),
        "one": lambda w, n: _snapshot(w, n, 1),
        "restore": _restore,
        "copy": _copy,
    }
    ms: dict[str, list[float]] = {name: [] for name in measures}
    added: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as folder:
        for n in range(max(times, 3)):  # interleaved: the load of the moment hits all alike
            for name, measure in measures.items():
                gc.collect()
                took, added[name] = measure(Path(folder), n)
                ms[name].append(took)
    copy = Figure.of(ms["copy"])
    base = f"copytree {copy} ms, {added['copy'] // 1024} KiB"
    label = f"{FILES} × {SIZE // 1024} KiB"
    out: list[Row] = []
    for name, what in (
        ("whole", "workspace snapshot, all new (ms)"),
        ("one", "workspace snapshot, 1 file changed (ms)"),
        ("restore", "workspace tree built from a snapshot (ms)"),
    ):
        figure = Figure.of(ms[name])
        ratio = figure.median / copy.median
        out.append((what, label, f"{figure}, {added[name] // 1024} KiB", base, f"×{ratio:.2f}"))
    return out
