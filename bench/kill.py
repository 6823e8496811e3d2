"""`python -m bench.kill [--kills N] [--quick] [--seed S]`: kill -9 journaled runs at random points,
resume each from its journal in a new process until it finishes, and check what the journals
promise: nothing lost, nothing that is not replay-safe run twice, every journal readable.

A run is a process of `bench._kill_child` at a time: sync or trio, tools in-process or in a
`Sandbox`, the journal's fsync policy "always", "batch", "round" or "never" (a kill -9 loses nothing
the OS was handed, so all four must hold). Each process is SIGKILLed after a random delay, from
0 up to the time the run still needs (a whole run's length, measured first and learnt as the
campaign goes, times the share of its calls not yet answered), or left to finish; the next
one resumes the run. The tools append their call ids to a side file, which counts how often
each call really ran. The seed fixes every run's plan, kind and delays; where the kills land
in a process still depends on the machine's timing.

Exit status 1 if any invariant breaks: the failures are printed, and the runs' files kept.
"""

from __future__ import annotations

__all__ = ["KINDS", "Report", "Tally", "campaign", "main"]

import argparse
import collections
import dataclasses
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from turnstile.core import Event, Loop, StopReason, TurnstileError
from turnstile.core.messages import AssistantMessage, ToolCall, ToolResults, validate_history
from turnstile.executors import CorruptJournal, Journal, TornJournal

from ._kill_world import INTERRUPTED, REPLAY_SAFE, effects, plan, spec

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("sync", "trio", "sync · sandbox", "trio · sandbox")
POLICIES = ("always", "batch", "round", "never")
MAX_KILLS = 6
"""Kills per run at most: the process after the last one is left to finish."""
SPARE = 0.1
"""The share of processes left to finish although the run could take another kill."""
HANG_S = 60.0
"""A process that takes this long is a failure (and is killed)."""
RESULTS = {"pay": "paid", "send": "sent", "read": "read", "fetch": "fetched"}


@dataclasses.dataclass
class Tally:
    """What the campaign counted, for one kind of run or all."""

    kills: int = 0
    runs: int = 0
    finished: int = 0
    resumed_twice: int = 0  # runs that needed two resumes or more
    calls: int = 0
    lost: int = 0
    doubled: int = 0  # calls that are not replay-safe and ran twice
    reruns: int = 0  # replay-safe calls run again
    interrupted: int = 0
    torn: int = 0
    unreadable: int = 0  # damaged, forgot or changed an event, or the loop refuses it

    def add(self, other: Tally) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@dataclasses.dataclass
class Report:
    """A campaign's tallies by kind of run, where its kills landed, and what broke."""

    seed: int
    seconds: float = 0.0
    tallies: dict[str, Tally] = dataclasses.field(
        default_factory=lambda: {kind: Tally() for kind in KINDS}
    )
    phases: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    policies: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    failures: list[str] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> Tally:
        total = Tally()
        for tally in self.tallies.values():
            total.add(tally)
        return total

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self) -> str:
        header = (
            "",
            "kills",
            "runs",
            "finished",
            "resumed ≥2×",
            "calls made",
            "lost",
            "not replay-safe run twice",
            "replay-safe rerun",
            "interrupted results",
            "torn tails dropped",
            "unreadable journals",
        )
        rows: list[tuple[str, ...]] = [header]
        for kind, tally in [*self.tallies.items(), ("total", self.total)]:
            rows.append((kind, *(str(v) for v in dataclasses.astuple(tally))))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = [
            " | ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        lines.insert(0, f"seed {self.seed}, {self.seconds:.1f} s")
        shown = ", ".join(f"{n} {phase}" for phase, n in self.phases.most_common())
        lines.append(f"kills by what the journal showed: {shown}")
        shown = ", ".join(f'"{p}" {self.policies[p]}' for p in POLICIES)
        lines.append(f"kills by fsync policy: {shown}")
        return "\n".join(lines)


@dataclasses.dataclass
class _Outcome:
    """One run's share of the report."""

    kind: str
    policy: str
    tally: Tally
    phases: collections.Counter[str]
    failures: list[str]


class _Watch:
    """What the campaign has seen of one run's journal: its events, which every later read must
    begin with (a journal is only appended to), and the torn tail it last found (a process
    killed before it cut the tail off leaves the same one to the next read)."""

    def __init__(self, path: Path, tally: Tally, failures: list[str], where: str) -> None:
        self.path, self.tally, self.failures, self.where = path, tally, failures, where
        self.events: list[Event] = []
        self.torn = ""

    def read(self) -> Loop | None:
        """The loop the journal holds (None if it holds none); damage, a journal that forgot
        or changed an event, or one the loop refuses, is a failure."""
        if not self.path.exists():
            return None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                events = Journal.read(self.path)
            except CorruptJournal as e:
                return self._fail(f"unreadable journal: {e}")
        for warning in caught:
            if issubclass(warning.category, TornJournal) and str(warning.message) != self.torn:
                self.torn = str(warning.message)
                self.tally.torn += 1
        if events[: len(self.events)] != self.events:
            return self._fail(f"the journal lost or changed events: {len(events)} now")
        self.events = events
        if not events:
            return None
        try:
            return Loop.replay(spec(), events)
        except TurnstileError as e:
            return self._fail(f"the loop refuses the journal: {e}")

    def _fail(self, failure: str) -> None:
        self.tally.unreadable += 1
        self.failures.append(f"{self.where}: {failure}")


def _phase(loop: Loop | None) -> str:
    if loop is None:
        return "no run yet"
    return {
        "awaiting_model": "a model call",
        "finalizing": "a model call",
        "awaiting_tools": "tool calls",
        "done": "the run done",
    }.get(loop.state.phase, loop.state.phase)


def _left(loop: Loop | None, calls: int) -> float:
    """About how much of a whole run's time a process resuming `loop` still has ahead: the
    share of its calls yet to be answered, and never less than a fifth (the process's start,
    the journal's reading)."""
    if loop is None:
        return 1.0
    answered = sum(len(m.results) for m in loop.state.messages if type(m) is ToolResults)
    return max(0.2, 1 - answered / calls)


def _child(
    journal: Path, side: Path, seed: int, kind: str, policy: str, prompt: bool
) -> subprocess.Popen[str]:
    """A process that runs or resumes the run in `journal`; its stderr goes to a file beside."""
    executor, _, runner = kind.partition(" · ")
    argv = [sys.executable, "-m", "bench._kill_child", "--journal", str(journal)]
    argv += ["--side", str(side), "--seed", str(seed), "--executor", executor]
    argv += ["--fsync", policy]
    argv += ["--sandbox"] * bool(runner) + ["--prompt"] * prompt
    with open(journal.with_suffix(".stderr"), "w") as stderr:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


def _finish(proc: subprocess.Popen[str]) -> str | None:
    """What the process printed after `ready`, once it exited (None if it hung, killed)."""
    assert proc.stdout is not None
    try:
        proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None
    return proc.stdout.read()  # a few lines: they fit in the pipe


def _ready(proc: subprocess.Popen[str]) -> float | None:
    """When the process said it is ready (None if it never did)."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], HANG_S)
    if readable and proc.stdout.readline() == "ready\n":
        return time.monotonic()
    return None


def _one_run(
    index: int, seed: int, lengths: _Lengths, folder: Path, sandbox_every: int
) -> _Outcome:
    """Run `index` of the campaign: kill it, resume it, until a process finishes it; then check
    its journal and side file."""
    rng = random.Random(f"{seed}:{index}")
    pair = index // 2
    sandboxed = pair % sandbox_every == sandbox_every - 1
    kind = KINDS[index % 2 + 2 * sandboxed]
    nth = pair // sandbox_every if sandboxed else pair - pair // sandbox_every  # of its kind
    policy = POLICIES[nth % len(POLICIES)]  # each kind of run gets every policy in turn
    journal, side = folder / f"run{index}.journal", folder / f"run{index}.side"
    side.touch()
    side.chmod(0o666)  # a sandboxed call may run as a user of its own
    where = f"run {index} ({kind}, fsync={policy!r}, {journal})"
    plan_seed = rng.randrange(2**32)
    planned = plan(plan_seed, str(side)).calls
    tally, phases, failures = Tally(runs=1), collections.Counter[str](), list[str]()
    watch = _Watch(journal, tally, failures, where)
    processes = 0
    while True:
        loop = watch.read()
        if failures:
            return _Outcome(kind, policy, tally, phases, failures)
        if processes:
            phases[_phase(loop)] += 1
        prompt = loop is None or rng.random() < 0.5
        delay, left = None, _left(loop, len(planned))
        if tally.kills < MAX_KILLS and _phase(loop) != "the run done" and rng.random() >= SPARE:
            delay = rng.uniform(0, lengths[kind, policy] * left)
        proc = _child(journal, side, plan_seed, kind, policy, prompt)
        processes += 1
        ready = _ready(proc)
        if ready is not None and delay is not None:
            time.sleep(max(0.0, ready + delay - time.monotonic()))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        out = _finish(proc)
        if out is None:
            failures.append(f"{where}: process {processes} hung")
            return _Outcome(kind, policy, tally, phases, failures)
        if proc.returncode == -signal.SIGKILL and delay is not None:
            tally.kills += 1
            continue
        if proc.returncode != 0 or ready is None or out.strip() != "finished completed":
            err = journal.with_suffix(".stderr").read_text().strip()[-2000:]
            failures.append(
                f"{where}: process {processes} exited {proc.returncode}, said {out!r}: {err}"
            )
            return _Outcome(kind, policy, tally, phases, failures)
        if _phase(loop) != "the run done":
            lengths.learn((kind, policy), time.monotonic() - ready, left)
        break
    tally.finished = 1
    tally.resumed_twice = int(processes >= 3)
    _check(watch, side, planned)
    return _Outcome(kind, policy, tally, phases, failures)


def _check(watch: _Watch, side: Path, planned: dict[str, str]) -> None:
    """The finished run against its plan and its side file."""
    tally, failures, where = watch.tally, watch.failures, watch.where
    loop = watch.read()
    if loop is None:
        failures.append(f"{where}: the journal of a finished run holds no run")
        return
    if loop.state.stop_reason is not StopReason.completed:
        failures.append(f"{where}: the run ended {loop.state.stop_reason.value}")
    messages = loop.state.messages
    try:
        validate_history(messages)
    except TurnstileError as e:
        failures.append(f"{where}: the run's history is invalid: {e}")
    made = [
        p.id
        for m in messages
        if type(m) is AssistantMessage
        for p in m.content
        if type(p) is ToolCall
    ]
    answers = collections.defaultdict(list)
    for m in messages:
        if type(m) is ToolResults:
            for r in m.results:
                answers[r.call_id].append(r)
    ran = effects(side)
    tally.calls = len(made)
    if made != list(planned):
        failures.append(f"{where}: the model made {made}, the plan {list(planned)}")
    for line in ran.keys() - planned.keys():
        failures.append(f"{where}: the side file has a line that names no call: {line!r}")
    for call_id, name in planned.items():
        found, count = answers.get(call_id, []), ran[call_id]
        if len(found) != 1:
            tally.lost += 1
            failures.append(f"{where}: {call_id} ({name}) has {len(found)} results")
            continue
        [result] = found
        if name in REPLAY_SAFE:
            tally.reruns += max(0, count - 1)
        elif count > 1:
            tally.doubled += 1
            failures.append(f"{where}: {call_id} ({name}) is not replay-safe and ran {count}×")
        if result.is_error and result.content.startswith(INTERRUPTED):
            tally.interrupted += 1
            if name in REPLAY_SAFE:
                failures.append(f"{where}: {call_id} ({name}) is replay-safe, yet interrupted")
        elif result.is_error or not result.content.startswith(RESULTS[name]):
            failures.append(f"{where}: {call_id} ({name}) answered {result.content[:200]!r}")
        elif count == 0:
            tally.lost += 1
            failures.append(f"{where}: {call_id} ({name}) has a result but never ran")


class _Lengths:
    """How long a whole run of each kind and fsync policy takes, from `ready` to its end: at
    first as measured for its kind, then learnt from each process left to finish (the load of
    a shared machine comes and goes, and fsync costs differ by policy)."""

    def __init__(self, folder: Path) -> None:
        measured = {kind: self._measure(folder, kind) for kind in KINDS}
        self.seconds = {(k, p): measured[k] for k in KINDS for p in POLICIES}
        self._lock = threading.Lock()

    def __getitem__(self, key: tuple[str, str]) -> float:
        return self.seconds[key]

    def learn(self, key: tuple[str, str], seconds: float, left: float) -> None:
        """A process finished in `seconds` the `left` share of a run."""
        with self._lock:
            self.seconds[key] = 0.7 * self.seconds[key] + 0.3 * seconds / left

    @staticmethod
    def _measure(folder: Path, kind: str) -> float:
        journal, side = folder / f"{kind}.journal", folder / f"{kind}.side"
        side.touch()
        side.chmod(0o666)
        proc = _child(journal, side, 0, kind, "batch", True)
        ready = _ready(proc)
        out = _finish(proc)
        if ready is None or out is None or proc.returncode != 0:
            raise RuntimeError(f"a whole {kind} run did not finish: {out!r}")
        return time.monotonic() - ready


def campaign(
    kills: int,
    seed: int,
    *,
    sandbox_every: int = 4,
    workers: int = 2,
    folder: Path | None = None,
    log: Callable[[str], object] = lambda _: None,
) -> Report:
    """Start runs (up to `workers` at once; every `sandbox_every`-th pair of them, one sync and
    one trio, with a `Sandbox`) until `kills` kills have landed. The runs' files go to `folder`
    (a new temporary one, removed afterwards if nothing failed)."""
    started = time.monotonic()
    report = Report(seed)
    own = folder is None
    folder = Path(tempfile.mkdtemp(prefix="turnstile-kill-")) if folder is None else folder
    folder.chmod(0o755)  # a sandboxed call may run as a user of its own
    (folder / "lengths").mkdir()
    lengths = _Lengths(folder / "lengths")
    shown = ", ".join(
        f"{k} {s * 1000:.0f} ms" for (k, p), s in lengths.seconds.items() if p == "batch"
    )
    log(f"whole runs take {shown}")
    landed, index = 0, 0
    with ThreadPoolExecutor(workers) as pool:
        running: set[Future[_Outcome]] = set()
        while landed < kills or running:
            while landed < kills and len(running) < workers:
                running.add(pool.submit(_one_run, index, seed, lengths, folder, sandbox_every))
                index += 1
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                outcome = future.result()
                report.tallies[outcome.kind].add(outcome.tally)
                report.phases.update(outcome.phases)
                report.policies[outcome.policy] += outcome.tally.kills
                report.failures += outcome.failures
                landed += outcome.tally.kills
    report.seconds = time.monotonic() - started
    shown = ", ".join(f"{k} {p} {s * 1000:.0f} ms" for (k, p), s in lengths.seconds.items())
    log(f"whole runs took at the end {shown}")
    if own and report.ok:
        shutil.rmtree(folder)
    elif not report.ok:
        log(f"the runs' files are kept in {folder}")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kill")
    p.add_argument("--kills", type=int, default=300, help="kills to land (300 by default)")
    p.add_argument("--quick", action="store_true", help="50 kills, fewer sandboxes (for CI)")
    p.add_argument("--seed", type=int, default=None, help="a random one by default, printed")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    kills, every = (50, 5) if args.quick else (args.kills, 4)
    print(f"kill -9 campaign: {kills} kills, seed {seed}", flush=True)
    report = campaign(kills, seed, sandbox_every=every, log=lambda s: print(s, flush=True))
    print(report.table())
    for failure in report.failures[:50]:
        print(f"FAILURE {failure}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
