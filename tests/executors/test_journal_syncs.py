"""How often each fsync policy syncs a journaled run, and what a crash leaves to resume: a run
killed (the journal as written) or powered off (the journal cut back to any point since its
last sync) at every moment resumes with no call run twice that is not replay-safe, and no call
answered that never ran."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from turnstile.core import Event, LoopSpec, StopReason, ToolContext, ToolStarted, tool
from turnstile.core.messages import ToolCall
from turnstile.executors import Journal

from .test_durable import agent, drive, kinds, pay, read, results

POLICIES = ["always", "batch", "round", "never"]


class Tracked:
    """Tools with effects counted by call id; every moment a crash could land at (after an
    append, after an effect) is kept with the journal as written and as synced then."""

    def __init__(self, effects: Counter[str] | None = None) -> None:
        self.effects: Counter[str] = Counter() if effects is None else Counter(effects)
        self.journal: Journal | None = None
        self.synced = 0
        self.moments: list[tuple[list[Event], int, Counter[str]]] = []

        @tool
        def pay(amount: int, context: ToolContext) -> str:
            """Pay once: running it twice pays twice."""
            self.effects[context.call_id] += 1
            self.moment()
            return f"paid {amount}"

        @tool(replay_safe=True)
        def read(path: str, context: ToolContext) -> str:
            """Read a file: harmless to run again."""
            self.effects[context.call_id] += 1
            self.moment()
            return f"read {path}"

        self.tools = [pay, read]

    def moment(self) -> None:
        if self.journal is not None:
            events = list(self.journal.events)
            self.moments.append((events, self.synced, Counter(self.effects)))


class Kept(Journal):
    """A journal that tells its world of every append once it is written, and of how much of
    it each sync made durable (an append's own, under "always"; a commit's)."""

    world: Tracked

    def append(self, event: Event) -> None:
        super().append(event)
        if self.fsync == "always":
            self.world.synced = len(self.events)
        self.world.moment()

    def commit(self) -> None:
        super().commit()
        if self.fsync != "never":
            self.world.synced = len(self.events)


def syncs_of(executor: str, policy: str, turns: list[list[ToolCall]], path: Path) -> int:
    """The data syncs of a run that makes the calls of each of `turns`, then answers."""
    Journal(path).close()
    counted: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("fsync", "fdatasync"):
            if hasattr(os, name):
                real = getattr(os, name)
                patch.setattr(os, name, lambda fd, real=real: (counted.append(fd), real(fd))[1])
        with Journal(path, fsync=policy) as journal:  # type: ignore[arg-type]
            run = drive(
                executor,
                LoopSpec(),
                "go",
                model=agent(*turns),
                tools=Tracked().tools,
                journal=journal,
            )
    assert run.stop_reason is StopReason.completed
    return len(counted)


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_a_round_of_n_calls_syncs_as_often_as_its_policy_says(
    executor: str, n: int, tmp_path: Path
) -> None:
    """A run of one turn of N calls, then the answer (its journal closed at the end):
    "always" syncs each of its 2N + 3 events; "batch" before each model call, each call
    (all a round's at once when they run together), and at the close; "round" once for the
    round and once at the close, plus once for each call after the first that is not
    replay-safe when the calls run one after another; "never" not at all."""
    unsafe = [pay(f"p{i}") for i in range(n)]
    safe = [read(f"r{i}") for i in range(n)]
    one_by_one = executor == "sync"
    expected = {
        "always": (2 * n + 3, 2 * n + 3),
        "batch": (n + 3, n + 3) if one_by_one else (4, 4),
        "round": (n + 1, 2) if one_by_one else (2, 2),
        "never": (0, 0),
    }
    for policy in POLICIES:
        got = tuple(
            syncs_of(executor, policy, [calls], tmp_path / f"{policy}-{i}.journal")
            for i, calls in enumerate([unsafe, safe])
        )
        assert got == expected[policy], policy


@pytest.mark.parametrize("executor", ["sync", "asyncio", "trio"])
def test_round_syncs_once_a_turn_where_the_tools_allow_it(executor: str, tmp_path: Path) -> None:
    """Turns of two calls each, then the answer: under "round" one data sync a round and one
    at the close, never one before a model call, for as many turns as the run takes, where
    the calls are replay-safe or start together (a concurrent executor); one after another,
    a call that is not replay-safe after the round's first keeps its own."""
    turns = 4
    safe = [[read(f"r{t}"), read(f"s{t}")] for t in range(turns)]
    unsafe = [[pay(f"p{t}", t), pay(f"q{t}", t)] for t in range(turns)]
    per_turn = {"sync": (1, 2)}.get(executor, (1, 1))
    for i, (calls, each) in enumerate(zip([safe, unsafe], per_turn, strict=True)):
        got = syncs_of(executor, "round", calls, tmp_path / f"{i}.journal")
        assert got == each * turns + 1, (i, got)


def test_a_round_starts_its_replay_safe_calls_with_its_first_and_the_rest_one_by_one(
    tmp_path: Path,
) -> None:
    """Under "round", one after another: the starts a crash before their call makes harmless
    (replay-safe calls, run on resume) go with the round's first call; a later call that is
    not replay-safe is recorded, and synced, just before it runs."""
    order: list[str] = []

    class Watched(Journal):
        new = False

        def append(self, event: Event) -> None:
            super().append(event)
            order.append(" ".join(kinds([event])))
            self.new = True

        def commit(self) -> None:
            super().commit()
            if self.new:  # a commit with something new to sync
                order.append("sync")
            self.new = False

    world = Tracked()
    calls = [pay("a"), read("r"), pay("b"), read("s")]
    with Watched(tmp_path / "run.journal", fsync="round") as journal:
        drive("sync", LoopSpec(), "go", model=agent(calls), tools=world.tools, journal=journal)
    assert order[: order.index("ToolReturned s") + 1] == [
        "Started",
        "ModelReplied",
        "ToolStarted a",
        "ToolStarted r",
        "ToolStarted s",
        "sync",
        "ToolReturned a",
        "ToolReturned r",
        "ToolStarted b",
        "sync",
        "ToolReturned b",
        "ToolReturned s",
    ]
    assert world.effects == Counter("arbs")


TURNS = ([pay("a"), read("r"), pay("b")], [read("s"), pay("c")])


@pytest.mark.parametrize("executor", ["sync", "trio"])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_crash_at_any_moment_resumes_each_call_as_the_policy_promises(
    executor: str, policy: str, tmp_path: Path
) -> None:
    """At every moment of a run (after each append, after each effect), a crash leaves the
    journal as written (a kill) or cut back to any record since the last sync (a power loss,
    except under "never", which promises nothing there). Resumed from each: every call
    answered once; one not replay-safe ran at most once, and was answered with its result
    only if it ran; a replay-safe one ran and has its result. One after another, at most the
    one call in flight is answered as interrupted."""
    Kept.world = tracked = Tracked()
    with Kept(tmp_path / "run.journal", fsync=policy) as journal:  # type: ignore[arg-type]
        tracked.journal = journal
        drive(executor, LoopSpec(), "go", model=agent(*TURNS), tools=tracked.tools, journal=journal)
    tracked.journal = None
    planned = {c.id: c.name for turn in TURNS for c in turn}
    checked = 0
    for at, (events, synced, effects) in enumerate(tracked.moments):
        for kept in range(len(events) if policy == "never" else synced, len(events) + 1):
            path = tmp_path / f"cut-{at}-{kept}.journal"
            with Journal(path, fsync="never") as cut:
                for event in events[:kept]:
                    cut.append(event)
            world = Tracked(effects)
            run = drive(
                executor, LoopSpec(), "go", model=agent(*TURNS), tools=world.tools, journal=path
            )
            where = (at, kept, kinds(events[:kept]), dict(effects))
            assert run.stop_reason is StopReason.completed, where
            got = results(run)
            assert got.keys() == planned.keys(), where
            interrupted = [c for c, r in got.items() if r.startswith("interrupted")]
            for call_id, name in planned.items():
                ran = world.effects[call_id]
                if name == "read":
                    assert ran >= 1 and call_id not in interrupted, where
                else:
                    assert ran <= 1, where
                    assert ran == 1 or call_id in interrupted, where
            if executor == "sync":
                assert len(interrupted) <= 1, where
            checked += 1
    assert checked >= len(tracked.moments)
    assert any(type(e) is ToolStarted for events, _, _ in tracked.moments for e in events)
