"""The phase table: one literal, a `transitions` machine built from it, and a loop that moves only
along its rows, each of which some run really takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from turnstile.core import (
    Approved,
    Cancelled,
    Compaction,
    Denied,
    GuardrailChecked,
    Guards,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core._machine import ACCEPTS, MACHINE, NEXT, PHASES, TABLE, trigger
from turnstile.core.conditions import TurnCountIs
from turnstile.core.diagram import mermaid
from turnstile.core.guardrails import Guardrail
from turnstile.core.messages import (
    AssistantMessage,
    ModelStop,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
)

from tests.core._drive import reply
from tests.core._scripts import Run, drive, specs

Move = tuple[str, type[Observation], str]


def decision(before: str, event: type[Observation], after: str) -> str:
    """The one decision of the table that leads from `before` on `event` to `after`."""
    found = [d for (p, e, d), a in NEXT.items() if (p, e, a) == (before, event, after)]
    assert len(found) == 1, f"no move {before} --{event.__name__}--> {after} in the table"
    return found[0]


class Machine:
    """The table's `transitions` machine, walked beside a loop: each step of the loop must be
    a move of the table, and firing that move must leave the machine where the loop is."""

    def __init__(self, seen: set[Move]) -> None:
        self.seen = seen
        self.state = ""
        MACHINE.add_model(self, initial="idle")

    def moved(self, before: str, event: type[Observation], after: str) -> None:
        assert self.state == before
        made = decision(before, event, after)
        self.trigger(trigger(event, made))  # type: ignore[attr-defined]  (added by transitions)
        assert self.state == after
        self.seen.add((before, event, made))

    def close(self) -> None:
        MACHINE.remove_model(self)


def test_the_table_is_whole_and_its_machine_and_flat_form_agree() -> None:
    assert tuple(TABLE) == tuple(ACCEPTS) == PHASES
    assert ACCEPTS["done"] == {Started}  # only a new run on the same conversation
    assert set(MACHINE.states) == set(PHASES)
    rows = {
        (phase, event, d): after
        for phase, events in TABLE.items()
        for event, decisions in events.items()
        for d, after in decisions.items()
    }
    assert NEXT == rows
    for (phase, event, d), after in NEXT.items():
        [move] = MACHINE.events[trigger(event, d)].transitions[phase]
        assert move.dest == after
    for phase, events in TABLE.items():
        for event, decisions in events.items():  # a move is known by where it leads
            assert len(set(decisions.values())) == len(decisions), (phase, event)
        assert phase == "done" or events[Cancelled] == {"finish": "done"}
    assert reachable("idle") == set(PHASES)
    assert all("done" in reachable(phase) for phase in PHASES)


def reachable(phase: str) -> set[str]:
    found, todo = {phase}, [phase]
    while todo:
        here = todo.pop()
        for (p, _, _), after in NEXT.items():
            if p == here and after not in found:
                found.add(after)
                todo.append(after)
    return found


def test_the_diagram_is_drawn_from_the_table(snapshot) -> None:
    assert mermaid() == snapshot


class Walked(Run):
    """A random world's run that walks the table's machine as it goes."""

    def __init__(self, spec: LoopSpec, machine: Machine) -> None:
        super().__init__(spec)
        self.machine = machine
        self.phase = "idle"

    def start(self, prompt: str = "hi") -> list[Any]:
        commands = super().start(prompt)
        self.step(Started)
        return commands

    def step(self, event: type[Observation]) -> None:
        self.machine.moved(self.phase, event, self.loop.state.phase)
        self.phase = self.loop.state.phase


@settings(max_examples=80, deadline=None)
@given(data=st.data(), spec=specs())
def test_random_runs_move_only_along_the_table_and_the_machine_agrees(
    data: st.DataObject, spec: LoopSpec
) -> None:
    machine = Machine(set())
    try:
        drive(data, Walked(spec, machine), on_step=lambda r: r.step(type(r.observations[-1])))
    finally:
        machine.close()


# -- every row is a move some run makes -------------------------------------------------------

TOOLS = (
    ToolSpec("a"),
    ToolSpec("b"),
    ToolSpec("h", needs_approval=True),
    ToolSpec("h2", needs_approval=True),
    ToolSpec("hs", needs_approval=True, parallel_safe=False),
    ToolSpec("s", parallel_safe=False),
    ToolSpec("f", finish=True),
)
LATE = 100.0  # past every scenario's deadline
RAILS = tuple(Guardrail(on, on) for on in ("input", "tool_call", "final"))  # type: ignore[arg-type]


class Scenario:
    """A loop driven by hand, a step a second, recording each move it makes in the table."""

    def __init__(self, seen: set[Move], **guards: Any) -> None:
        stop_when = guards.pop("stop_when", ())
        compaction = guards.pop("compaction", None)
        guardrails = guards.pop("guardrails", ())
        limits = {"deadline_s": 10.0, "max_turns": None, **guards}
        if compaction is not None:  # a window small enough to fill in a few turns
            limits.update(context_window=1_000, reserve_tokens=0)
        spec = LoopSpec(
            tools=TOOLS,
            guards=Guards(**limits),
            stop_when=stop_when,
            compaction=compaction,
            guardrails=guardrails,
        )
        self.loop = Loop(spec)
        self.machine = Machine(seen)
        self.now = 0.0
        self.model = ""
        self.first = ""  # the run's first model call, beside which its input is checked
        self.turn = 0

    def _step(self, event: type[Observation], act: Callable[[], list[Any]]) -> None:
        before = self.loop.state.phase
        for command in act():
            if type(command).__name__ == "CallModel":
                self.model = command.id
                self.first = self.first or command.id
        self.machine.moved(before, event, self.loop.state.phase)

    def _at(self, late: bool) -> float:
        self.now = LATE if late else self.now + 1.0
        return self.now

    def start(self, prompt: Any = "go") -> Scenario:
        self._step(Started, lambda: self.loop.start(prompt, self._at(False)))
        return self

    def reply(
        self, *tools: str, stop: ModelStop | None = None, late: bool = False, text: str = ""
    ) -> Scenario:
        self.turn += 1
        calls = [ToolCall(f"{t}{self.turn}", t, {"n": self.turn}) for t in tools]
        # without usage, the loop counts the context by its own estimate (about 3 bytes a token)
        usage = Usage() if self.loop.spec.compaction is not None else Usage(10, 5)
        response = reply(*([text] if text else []), *calls, stop=stop, usage=usage)
        obs = ModelReplied(self.model, response, now=self._at(late))
        self._step(ModelReplied, lambda: self.loop.send(obs))
        return self

    def result(self, tool: str, late: bool = False, size: int = 0) -> Scenario:
        obs = ToolReturned(f"{tool}{self.turn}", "x" * size or "ok", now=self._at(late))
        self._step(ToolReturned, lambda: self.loop.send(obs))
        return self

    def approve(self, tool: str, late: bool = False) -> Scenario:
        obs = Approved(f"{tool}{self.turn}", now=self._at(late))
        self._step(Approved, lambda: self.loop.send(obs))
        return self

    def deny(self, tool: str, late: bool = False) -> Scenario:
        obs = Denied(f"{tool}{self.turn}", now=self._at(late))
        self._step(Denied, lambda: self.loop.send(obs))
        return self

    def fail(self, retryable: bool = True, late: bool = False) -> Scenario:
        obs = ModelFailed(self.model, "overloaded", retryable, now=self._at(late))
        self._step(ModelFailed, lambda: self.loop.send(obs))
        return self

    def tick(self, late: bool = False) -> Scenario:
        obs = Tick(now=self._at(late))
        self._step(Tick, lambda: self.loop.send(obs))
        return self

    def started(self, tool: str) -> Scenario:
        obs = ToolStarted(f"{tool}{self.turn}", now=self._at(False))
        self._step(ToolStarted, lambda: self.loop.send(obs))
        return self

    def resumed(self, late: bool = False) -> Scenario:
        obs = Resumed(now=self._at(late))
        self._step(Resumed, lambda: self.loop.send(obs))
        return self

    def checked(
        self, on: str, tool: str = "", tripped: bool = False, late: bool = False
    ) -> Scenario:
        """A guardrail of `RAILS` answers: the one on the input, on `tool`'s call, or on the
        answer."""
        at = {"input": self.first, "tool_call": f"{tool}{self.turn}", "final": self.model}[on]
        obs = GuardrailChecked(f"{at}/{on}/{on}", tripped, "no", now=self._at(late))
        self._step(GuardrailChecked, lambda: self.loop.send(obs))
        return self

    def cancel(self) -> Scenario:
        obs = Cancelled("enough", now=self._at(False))
        self._step(Cancelled, lambda: self.loop.send(obs))
        return self


def scenarios(seen: set[Move]) -> list[Scenario]:
    """Short runs that, between them, make every move of the table."""
    made: list[Scenario] = []

    def new(**guards: Any) -> Scenario:
        made.append(Scenario(seen, **guards))
        return made[-1]

    no_finalize = {"finalize": False}
    # idle
    new().cancel()
    new(stop_when=(TurnCountIs(0),)).start()
    # done: the conversation goes on
    new().start().reply().start().reply()
    new(stop_when=(lambda state: len(state.messages) > 2,)).start().reply().start()
    # awaiting_model
    new().start().tick().reply("a").result("a").reply()
    new().start().reply(stop=ModelStop.pause).reply("nope").fail().fail(retryable=False)
    new().start().tick(late=True)
    new().start().reply("nope").tick(late=True).cancel()
    new().start().reply("nope").fail(late=True).fail().fail(retryable=False)
    new(max_turns=1).start().reply("nope").tick().reply()
    new(max_turns=1).start().reply("a").result("a").cancel()
    # awaiting_tools
    new().start().reply("a", "b").result("a").tick().result("b").cancel()
    new().start().reply("s", "h").result("s").approve("h").result("h").cancel()
    new().start().reply("h", "f").approve("h").result("h")
    for guards in ({}, no_finalize):
        new(**guards).start().reply("a", "h").approve("h", late=True)
        new(**guards).start().reply("a", "h").deny("h", late=True)
        new(**guards).start().reply("a", "h").tick(late=True)
        new(**guards, max_turns=1).start().reply("a").result("a")
    new().start().reply("a", "h").approve("h").result("a").result("h").cancel()
    new().start().reply("a", "h").deny("h").result("a").cancel()
    # awaiting_approval
    new().start().reply("hs", "h").approve("h").tick().approve("hs").cancel()
    new().start().reply("hs", "a").deny("hs").result("a").cancel()
    new().start().reply("h", "h2").deny("h").deny("h2").cancel()
    for guards in ({}, no_finalize):
        new(**guards).start().reply("h").approve("h", late=True)
        new(**guards).start().reply("h", "h2").deny("h", late=True)
        new(**guards).start().reply("h").tick(late=True)
        new(**guards, max_turns=1).start().reply("h").deny("h")
    new().start().reply("h").cancel()
    # resumed after a crash, and a call's start
    new().start().resumed()
    new().start().resumed(late=True)
    new().start().reply("nope").resumed(late=True)
    new().start().reply("a", "b").started("a").resumed()
    new().start().reply("a", "h").started("a").resumed()
    new().start().reply("a").started("a").resumed()
    for guards in ({}, no_finalize):
        new(**guards, max_turns=1).start().reply("a").started("a").resumed()
    new().start().reply("h").resumed()
    new(max_turns=1).start().reply("nope").resumed()
    # finalizing
    new(max_turns=1).start().reply("nope").tick().fail().fail(retryable=False)
    new(max_turns=1).start().reply("nope").cancel()
    # compacting: the window (1,000 tokens) fills, and the older turns are summarized first
    summarize = {"compaction": Compaction(strategy="summarize", keep_turns=1)}
    big, half = 2_400, 1_500  # a result of about 800 tokens, 500 tokens
    given = [
        UserMessage("go"),
        AssistantMessage([ToolCall("x", "a", {})]),
        ToolResults([ToolResult("x", "x" * big)]),
        AssistantMessage(reply("seen").content),
        UserMessage("more"),
    ]
    new(**summarize).start(given).reply(text="so far").reply()
    new(**summarize).start().reply("a").result("a", size=half).reply().start("y" * 1_000)
    new(**summarize).start().reply("a").result("a", size=half).reply(
        text="y" * half, stop=ModelStop.pause
    )
    new(**summarize).start().reply("a").result("a", size=big).reply("a").started("a").resumed()
    new(**summarize).start().reply("a").result("a", size=big).reply("h").deny("h").cancel()
    twice = new(**summarize).start().reply("a").result("a", size=half).reply("a").result("a")
    twice.reply("a").result("a", size=1_200).reply(text="y" * half).reply(text="short").cancel()

    def compacting(**guards: Any) -> Scenario:
        return (
            new(**summarize, **guards)
            .start()
            .reply("a")
            .result("a")
            .reply("a")
            .result("a", size=big)
        )

    compacting().tick().fail().resumed().fail(retryable=False)
    compacting().fail(late=True)
    compacting().reply(text="summary", late=True)
    compacting(stop_when=(lambda state: bool(state.compactions),)).reply(text="summary")
    for guards in ({}, no_finalize):
        compacting(**guards).tick(late=True)
        compacting(**guards).resumed(late=True)
    compacting(**no_finalize).reply(text="summary", late=True)
    # guardrails: the input checked beside the first call, a round or an answer held for theirs
    railed = {"guardrails": RAILS}
    new(**railed).start().checked("input").reply("a").checked("tool_call", "a").result("a")
    new(**railed).start().checked("input", tripped=True)
    new(**railed).start().reply("a", "h").checked("input").checked("tool_call", "a").cancel()
    new(**railed).start().reply("h").checked("input").checked("tool_call", "h").deny("h")
    new(**railed).start().reply("a").checked("input").checked("tool_call", "a", tripped=True)
    new(**railed).start().reply("a").tick().resumed().checked("input").tick(late=True)
    new(**railed).start().reply("a").resumed(late=True)
    new(**railed).start().reply("a").checked("input").checked("tool_call", "a", late=True)
    new(**railed).start().reply().checked("input").checked("final")
    finals = {"guardrails": RAILS[2:]}
    new(**finals).start().reply("a", "f").result("a").checked("final")
    new(**finals).start().reply("a", "f").started("a").resumed().checked("final", tripped=True)
    new(**finals).start().reply("h", "f").deny("h").checked("final")
    inputs = {"guardrails": RAILS[:1], **summarize}
    new(**inputs).start(given).checked("input").reply(text="so far").reply()
    new(**inputs).start(given).checked("input", tripped=True)
    new(**railed).start().reply(stop=ModelStop.pause).checked("input", late=True)
    unchecked = new(**inputs).start().reply("nope", text="y" * half)
    unchecked.reply("nope", text="y" * half).checked("input", late=True)  # compacting, late
    return made


def test_every_move_of_the_table_is_made_by_some_run() -> None:
    seen: set[Move] = set()
    for scenario in scenarios(seen):
        scenario.machine.close()
    missing = sorted(
        f"{p} --{e.__name__}: {d}--> {NEXT[(p, e, d)]}" for p, e, d in set(NEXT) - seen
    )
    assert not missing, "moves no run makes:\n" + "\n".join(missing)


def _phase_writers() -> set[str]:
    """Every function of the core that assigns to a `.phase`, as `Class.function`."""
    import ast
    import pathlib

    import turnstile.core

    writers: set[str] = set()
    for path in pathlib.Path(turnstile.core.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for cls in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
            prefix = f"{cls.name}." if isinstance(cls, ast.ClassDef) else ""
            for fn in cls.body:
                if not isinstance(fn, ast.FunctionDef):
                    continue
                for node in ast.walk(fn):
                    targets = (
                        node.targets
                        if isinstance(node, ast.Assign)
                        else [node.target]
                        if isinstance(node, ast.AugAssign | ast.AnnAssign)
                        else []
                    )
                    if any(isinstance(t, ast.Attribute) and t.attr == "phase" for t in targets):
                        writers.add(f"{path.stem}:{prefix}{fn.name}")
    return writers


def test_one_apply_is_the_only_writer_of_the_phase() -> None:
    assert _phase_writers() == {"_step:Step.apply"}


def test_the_phase_is_a_member_in_the_loop_and_a_plain_string_in_the_dump() -> None:
    from turnstile.core._machine import Phase

    loop = Loop(LoopSpec())
    loop.start("hi", 0.0)
    assert loop.state.phase is Phase.awaiting_model
    assert b'"phase":"awaiting_model"' in loop.dump()
    assert Loop.load(LoopSpec(), loop.dump()).state.phase is Phase.awaiting_model
