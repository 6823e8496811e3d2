"""`simulate`: an agent run under many seeded worlds of faults, each checked after every step;
a failure shrunk to its fewest faults and earliest crash, ready to keep as a test."""

from __future__ import annotations

__all__ = [
    "Outcome",
    "SimulationFailed",
    "SimulationReport",
    "Violation",
    "replayed",
    "simulate",
]

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from turnstile.core import (
    AwaitApproval,
    Event,
    LoopSpec,
    LoopState,
    ModelError,
    ModelRequest,
    StopReason,
    Tool,
)
from turnstile.core.messages import Message, ModelResponse
from turnstile.executors._agent import Agent
from turnstile.executors._effects import Decision
from turnstile.executors._protocols import ToolRunner
from turnstile.executors._run import Run
from turnstile.executors._scripted import ScriptedModel
from turnstile.executors._toolbox import as_runner, caller
from turnstile.executors._transcript import transcript

from ._faults import Fault, Faults, Schedule
from ._invariants import finals, step_checks
from ._traced import by_turn_once, from_trace, turn_of
from ._world import Setup, World

MAX_TIME_S = 86_400.0
"""The virtual-time bound: a run not finished after a day of virtual time hangs."""

Reply = Callable[[ModelRequest], ModelResponse]
Expect = Callable[[Run], object] | Collection[StopReason]


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """An invariant that broke: which, how, in which seed, at which step and virtual time,
    under which faults (shrunk: the fewest that still break it), with the run's transcript
    until then and the model's replies by turn (`save` keeps it all as a regression file)."""

    invariant: str
    message: str
    seed: int
    step: int
    time: float
    faults: tuple[Fault, ...]
    transcript: str
    replies: dict[int, ModelResponse] = {}
    target: str | None = None
    """The simulation's "module:name", if known: what a regression file replays."""

    def __str__(self) -> str:
        faults = ", ".join(f"{f.kind.value}@{f.n}" for f in self.faults) or "none"
        return (
            f"invariant {self.invariant} broke at step {self.step} ({self.time:g} s virtual) "
            f"of seed {self.seed}, under faults: {faults}\n  {self.message}\n\n"
            f"The run until then:\n{self.transcript}"
        )

    def save(self, path: str | Path) -> Path:
        """Write this violation as a regression file (JSON): the pytest plugin collects a file
        named `*.simulation.json` as a test that replays its fault schedule (see `replayed`)."""
        path = Path(path)
        path.write_bytes(msgspec.json.format(msgspec.json.encode(self)) + b"\n")
        return path

    @staticmethod
    def load(path: str | Path) -> Violation:
        """The violation a regression file holds."""
        return msgspec.json.decode(Path(path).read_bytes(), type=Violation)


class SimulationFailed(AssertionError):
    """A simulated run broke an invariant: `violation` says which, where and how."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation
        super().__init__(str(violation))


@dataclass(frozen=True)
class Outcome:
    """One seed's run: how it stopped, the faults that struck, its steps, virtual time,
    crashes, the journal's events, and the violation, if any (unshrunk)."""

    seed: int
    stop_reason: StopReason
    faults: tuple[Fault, ...]
    steps: int
    time: float
    crashes: int
    events: tuple[Event, ...]
    violation: Violation | None


@dataclass(frozen=True)
class SimulationReport:
    """Every seed's `Outcome`, and the violations found, each shrunk (the first of each kind)."""

    runs: list[Outcome]
    violations: list[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations

    def raise_for_violation(self) -> None:
        """Raise `SimulationFailed` for the first violation, if any."""
        if self.violations:
            raise SimulationFailed(self.violations[0])

    def __str__(self) -> str:
        stops = Counter(r.stop_reason.value for r in self.runs)
        struck = Counter(f.kind.value for r in self.runs for f in r.faults)
        lines = [
            f"{len(self.runs)} seeds, {sum(r.violation is not None for r in self.runs)} broke "
            "an invariant",
            "stop reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(stops.items())),
            "faults struck: " + (", ".join(f"{k} {v}" for k, v in sorted(struck.items())) or "-"),
        ]
        return "\n".join(lines + [f"\n{v}" for v in self.violations])


def _by_turn(script: Sequence[ModelResponse | ModelError]) -> Reply:
    """A script's replies by turn (the request's assistant messages): a call made again after
    a retry or a crash gets the same reply, as a recorded conversation would give it."""

    def reply(request: ModelRequest) -> ModelResponse:
        turn = turn_of(request)
        if turn >= len(script):
            raise ModelError(f"the script has no reply for turn {turn}", retryable=False)
        item = script[turn]
        if isinstance(item, ModelError):
            raise item
        return item

    return reply


def _reply(model: Any) -> Reply:
    if isinstance(model, ScriptedModel):
        model = model._script
    if isinstance(model, Sequence):
        return _by_turn(model)
    if getattr(model, "complete", None) is not None:
        return by_turn_once(model)
    if callable(model):
        return model  # type: ignore[no-any-return]
    raise TypeError(
        "simulate() takes a model as a ScriptedModel, a list of replies (by turn), a function "
        f"of the request, a ModelClient or a trace, got {model!r}"
    )


def _recorded(replies: Mapping[int, ModelResponse], model: Reply) -> Reply:
    """The replies a regression file recorded, by turn; the model's own past them."""

    def reply(request: ModelRequest) -> ModelResponse:
        recorded = replies.get(turn_of(request))
        return model(request) if recorded is None else recorded

    return reply


@dataclass(frozen=True)
class _Plan:
    setup: Setup
    faults: Faults
    reset: Callable[[], object] | None
    target: str | None

    def run(self, seed: int, fixed: Iterable[Fault] | None = None) -> Outcome:
        if self.reset is not None:
            self.reset()
        world = World(self.setup, Schedule(seed, self.faults, fixed))
        session = world.run()
        state = session.loop.state
        violation = None
        if world.broken is not None:
            violation = Violation(
                invariant=world.broken[0],
                message=world.broken[1],
                seed=seed,
                step=world.step,
                time=world.now,
                faults=tuple(world.schedule.struck),
                transcript=transcript(state),
                replies=world.replies,
                target=self.target,
            )
        return Outcome(
            seed,
            state.stop_reason,
            tuple(world.schedule.struck),
            world.step,
            world.now,
            world.crashes,
            tuple(state.events),
            violation,
        )

    def shrink(self, found: Violation) -> Violation:
        """The fewest faults that still break the same invariant, each crash moved as early
        as it still does: removed one at a time until none can go, then crashes moved."""
        best = found

        def breaks(faults: Sequence[Fault]) -> bool:
            nonlocal best
            v = self.run(found.seed, faults).violation
            if v is None or v.invariant != found.invariant:
                return False
            best = v
            return True

        if best.faults and not breaks([]):
            changed = True
            while changed:
                changed = False
                for fault in best.faults:
                    if breaks([f for f in best.faults if f is not fault]):
                        changed = True
                        break
        for i, fault in enumerate(best.faults):
            for n in range(fault.n):
                moved = Fault(fault.kind, n)
                faults = best.faults
                if moved not in faults and breaks([*faults[:i], moved, *faults[i + 1 :]]):
                    break
        return best


def simulate(
    spec: LoopSpec | Agent | None,
    prompt: str | Sequence[Message] | None = None,
    *,
    seeds: int | Iterable[int] = 100,
    shrink: bool = True,
    keep_going: bool = False,
    **options: Any,
) -> SimulationReport:
    """Run the agent once per seed (`seeds`: a count from 0, or the seeds), each in a world of
    its own: a virtual clock, a scheduler that decides when each call comes back (overlapping
    tool calls in any order) and `faults` drawn by the seed (default `Faults()`), the
    executor's protocol (`Session`) over an in-memory journal, a crash resumed from it.

    `model` answers: a `ScriptedModel` or a list of replies (by turn: a call asked again gets
    the same reply), a function of the `ModelRequest`, a `ModelClient` (asked once per turn,
    its reply kept for every seed: a client over a replayed trace serves each exchange once),
    or a recorded trace (a `Trace` or its path: its spec, prompt and tool outputs by call id
    too, where `spec`, `prompt`, `tools` are not given); an `Agent` brings its own, and its
    `tools`. A model string (`"openai:gpt-4.1"`) is a live model, called only with `live=True`
    (once a turn, as a `ModelClient`). `reset` runs before each seed (and each replay), to give the
    tools a fresh world; `deps` reaches the tools that ask for a `ToolContext`. `approve`
    answers approvals (default: yes). `tool_timeout` ends calls that run longer, as the async
    executor does (a tool's own `timeout_s` first).

    After every step: the history is valid, dump, load and replay agree, no call that is not
    replay-safe ran twice, the budgets hold, and each of `invariants` (functions of the
    `LoopState`: False or an `AssertionError` breaks one); no run waits past `max_time` virtual
    seconds. At the end: every call answered, a named stop reason, and `expect` (stop reasons,
    or a function of the `Run`). `checks=False` checks nothing (a baseline).

    The first violating seed ends the simulation (`keep_going`: every seed runs, and the first
    violation of each invariant is kept); with `shrink`, its faults are shrunk. `target`
    ("module:name") goes in the regression file `Violation.save` writes.
    """
    plan = _planned(spec, prompt, **options)
    runs: list[Outcome] = []
    found: dict[str, Violation] = {}
    for seed in range(seeds) if isinstance(seeds, int) else seeds:
        outcome = plan.run(seed)
        runs.append(outcome)
        v = outcome.violation
        if v is not None and v.invariant not in found:
            found[v.invariant] = plan.shrink(v) if shrink else v
            if not keep_going:
                break
    return SimulationReport(runs, list(found.values()))


def _is_trace(model: object) -> bool:
    if isinstance(model, Path) or (isinstance(model, str) and model.endswith(".json")):
        return True
    return type(model).__name__ == "Trace" and type(model).__module__.startswith("turnstile.")


def _planned(
    spec: LoopSpec | Agent | None,
    prompt: str | Sequence[Message] | None,
    *,
    model: Any = None,
    tools: ToolRunner | Iterable[Tool | Callable[..., Any]] = (),
    faults: Faults | None = None,
    invariants: Sequence[Callable[[LoopState], object]] = (),
    expect: Expect | None = None,
    approve: Callable[[AwaitApproval], Decision] | None = None,
    reset: Callable[[], object] | None = None,
    deps: Any = None,
    tool_timeout: float | None = None,
    max_time: float = MAX_TIME_S,
    checks: bool = True,
    target: str | None = None,
    recorded: Mapping[int, ModelResponse] | None = None,
    live: bool = False,
) -> _Plan:
    if isinstance(spec, Agent):
        model = spec.model if model is None else model
        tools = spec.tools if tools == () else tools
        spec = spec.spec
    wire = None
    if _is_trace(model):
        model, traced, traced_spec, traced_prompt, wire = from_trace(model)
        tools = traced if tools == () else tools
        spec = traced_spec if spec is None else spec
        prompt = traced_prompt if prompt is None else prompt
    if spec is None:
        raise ValueError("simulate() needs a spec, an Agent, or a trace as the model")
    if isinstance(model, str):
        if not live:
            raise TypeError(
                f"{model!r} is a live model, which simulate() calls only when told to "
                "(live=True, --live: each turn is asked once, which costs money and needs the "
                "provider's key); or give a ScriptedModel, replies, a function or a trace"
            )
        from turnstile.providers import model_client  # (only a live run needs the SDKs)

        model = model_client(model)
    if prompt is None:
        raise ValueError("simulate() needs the prompt the agent is run with")
    runner = as_runner(tools)
    reply = _reply(model)
    setup = Setup(
        spec=spec,
        prompt=prompt,
        reply=reply if recorded is None else _recorded(recorded, reply),
        specs=tuple(runner.specs),
        run_call=caller(runner, deps),
        approve=approve,
        checks=step_checks(invariants) if checks else [],
        finals=finals(expect) if checks else [],
        tool_timeout=tool_timeout,
        max_time=max_time,
        wire=wire,
    )
    return _Plan(setup, Faults() if faults is None else faults, reset, target)


def replayed(
    violation: Violation | str | Path,
    spec: LoopSpec | Agent | None,
    prompt: str | Sequence[Message] | None = None,
    **options: Any,
) -> Outcome:
    """Run a violation's seed again under exactly its faults, with the model's recorded
    replies (the model's own past them), and `simulate`'s checks; raise `SimulationFailed` if
    any invariant breaks. A regression test: it fails until the bug is fixed."""
    if not isinstance(violation, Violation):
        violation = Violation.load(violation)
    plan = _planned(spec, prompt, recorded=violation.replies, **options)
    outcome = plan.run(violation.seed, violation.faults)
    if outcome.violation is not None:
        raise SimulationFailed(outcome.violation)
    return outcome
