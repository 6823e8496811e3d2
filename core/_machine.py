"""The loop's phases and every move between them, in one table.

Theory of operation: the loop is always in one phase. `TABLE` says, for each phase, what can
happen there (an event: the conversation handed to `Loop.start`, or an observation handed to
`Loop.send`), what the loop may decide on it, and which phase each decision leads to. The loop
changes phase only by looking its move up here: an event the current phase does not list is
refused with a `ProtocolError` before anything changes, and a decision the table does not list
for that event is a bug in the loop (a `KeyError`). The `transitions` machine is built from
`TABLE` at import (so a table naming a phase that does not exist fails then), and so are
`ACCEPTS` and `NEXT`, the machine's moves as a flat dict; the diagram is drawn from the same
table, and a test walks the loop and the machine side by side.

The decisions:
    ask       ask the model (again: after a round, a pause, a retryable failure)
    run       tool calls are running (the round's, or ones a result or an approval let go)
    approve   nothing can run until a human answers
    wait      nothing to do yet
    finalize  a budget ran out: one last model call, without tools
    check     guardrails must answer first: the turn (its round, or the answer) is held until
              every check asked for passed (`LoopSpec.guardrails`)
    compact   the conversation nears the context window: ask the model to summarize its older
              turns (`Compaction(strategy="summarize")`; the other strategies need no call)
    finish    the run is over
"""

from __future__ import annotations

__all__ = [
    "ACCEPTS",
    "MACHINE",
    "NEXT",
    "PHASES",
    "TABLE",
    "Decision",
    "Phase",
    "dot",
    "mermaid",
    "trigger",
]

from enum import StrEnum
from typing import Literal

from transitions import Machine

from ._observations import (
    Approved,
    Cancelled,
    Denied,
    GuardrailChecked,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)


class Phase(StrEnum):
    """Where the loop is; a plain string in a dump."""

    idle = "idle"
    awaiting_model = "awaiting_model"
    awaiting_tools = "awaiting_tools"
    awaiting_approval = "awaiting_approval"
    compacting = "compacting"
    finalizing = "finalizing"
    checking = "checking"
    done = "done"


class Decision(StrEnum):
    """What the loop makes of an event: the move the table takes (see the module's docstring)."""

    ask = "ask"
    run = "run"
    approve = "approve"
    wait = "wait"
    finalize = "finalize"
    compact = "compact"
    check = "check"
    finish = "finish"


PHASES = tuple(Phase)
IDLE, MODEL, TOOLS, APPROVAL, COMPACTING, FINALIZING, CHECKING, DONE = PHASES
ASK, RUN, APPROVE, WAIT, FINALIZE, COMPACT, CHECK, FINISH = tuple(Decision)

# a budget can run out (or the deadline pass) whatever happened, and a run can always end
_OUT = {FINALIZE: FINALIZING, FINISH: DONE}
# before each turn the loop may first have the older turns summarized
_TURN = {ASK: MODEL, COMPACT: COMPACTING}

TABLE: dict[Phase, dict[type[Observation], dict[Decision, Phase]]] = {
    IDLE: {
        Started: {**_TURN, FINISH: DONE},
        Cancelled: {FINISH: DONE},
    },
    MODEL: {
        ModelReplied: {RUN: TOOLS, APPROVE: APPROVAL, CHECK: CHECKING, **_TURN, **_OUT},
        ModelFailed: {ASK: MODEL, **_OUT},
        Tick: {WAIT: MODEL, **_OUT},
        Resumed: {WAIT: MODEL, **_OUT},
        GuardrailChecked: {WAIT: MODEL, **_OUT},  # the run's input, checked meanwhile
        Cancelled: {FINISH: DONE},
    },
    TOOLS: {
        ToolStarted: {WAIT: TOOLS},
        ToolReturned: {RUN: TOOLS, APPROVE: APPROVAL, CHECK: CHECKING, **_TURN, **_OUT},
        Approved: {RUN: TOOLS, **_OUT},
        Denied: {RUN: TOOLS, **_OUT},
        Tick: {WAIT: TOOLS, **_OUT},
        Resumed: {RUN: TOOLS, APPROVE: APPROVAL, CHECK: CHECKING, **_TURN, **_OUT},
        Cancelled: {FINISH: DONE},
    },
    APPROVAL: {  # only a human can move it on: its time is not the run's, no deadline falls
        Approved: {RUN: TOOLS, APPROVE: APPROVAL},
        Denied: {RUN: TOOLS, APPROVE: APPROVAL, CHECK: CHECKING, **_TURN, **_OUT},
        Tick: {WAIT: APPROVAL},
        Resumed: {APPROVE: APPROVAL},
        Cancelled: {FINISH: DONE},
    },
    COMPACTING: {  # the summary is written: on to the turn (or another summary, or a stop)
        ModelReplied: {**_TURN, **_OUT},
        ModelFailed: {COMPACT: COMPACTING, **_OUT},
        Tick: {WAIT: COMPACTING, **_OUT},
        Resumed: {WAIT: COMPACTING, **_OUT},
        GuardrailChecked: {WAIT: COMPACTING, **_OUT},
        Cancelled: {FINISH: DONE},
    },
    FINALIZING: {
        ModelReplied: {FINISH: DONE},
        ModelFailed: {ASK: FINALIZING, FINISH: DONE},
        Tick: {WAIT: FINALIZING},
        Resumed: {WAIT: FINALIZING},
        Cancelled: {FINISH: DONE},
    },
    CHECKING: {  # a reply's round or answer held until its guardrails answer: none runs before
        GuardrailChecked: {WAIT: CHECKING, RUN: TOOLS, APPROVE: APPROVAL, **_OUT},
        Tick: {WAIT: CHECKING, FINISH: DONE},  # (checks still out: no last call, no answer)
        Resumed: {WAIT: CHECKING, FINISH: DONE},
        Cancelled: {FINISH: DONE},
    },
    DONE: {  # a new run on the same conversation
        Started: {**_TURN, FINISH: DONE},
    },
}

ACCEPTS: dict[Phase, frozenset[type[Observation]]] = {
    phase: frozenset(events) for phase, events in TABLE.items()
}
"""The events each phase takes; `Started` only through `Loop.start`."""


def trigger(event: type[Observation], decision: Decision) -> str:
    """The name of a move in the `transitions` machine."""
    return f"{event.__name__}_{decision.value}"


_MOVES = {
    trigger(event, decision): (event, decision)
    for events in TABLE.values()
    for event, decisions in events.items()
    for decision in decisions
}
_TRANSITIONS = sorted(  # cancelling last, so the diagram draws the main flow first
    (
        # plain strings: `transitions` would name an Enum state by its member's name
        {"trigger": trigger(event, decision), "source": phase.value, "dest": after.value}
        for phase, events in TABLE.items()
        for event, decisions in events.items()
        for decision, after in decisions.items()
    ),
    key=lambda t: t["trigger"] == trigger(Cancelled, FINISH),
)

MACHINE = Machine(
    model=None,
    states=[p.value for p in PHASES],
    transitions=_TRANSITIONS,
    initial=IDLE.value,
    auto_transitions=False,
)
"""`TABLE` as a `transitions` machine: one trigger per move, named by `trigger()`."""

NEXT: dict[tuple[Phase, type[Observation], Decision], Phase] = {
    (Phase(source), *_MOVES[name]): Phase(str(t.dest))
    for name, event in MACHINE.events.items()
    for source, moves in event.transitions.items()
    for t in moves
}
"""The machine's moves, (phase, event, decision) -> next phase: the loop's moves, which the
tests walk the loop against."""


def _graph(engine: Literal["graphviz", "mermaid"]) -> object:
    from transitions.extensions.diagrams import GraphMachine

    drawn = GraphMachine(
        states=[p.value for p in PHASES],
        # each arrow is labelled with the events that take it, not with every move's name
        transitions=[{**t, "label": _MOVES[t["trigger"]][0].__name__} for t in _TRANSITIONS],
        initial=IDLE.value,
        auto_transitions=False,
        graph_engine=engine,
        title="turnstile loop",
    )
    return drawn.get_graph()


def mermaid() -> str:
    """`TABLE` drawn as a Mermaid state diagram (no graphviz needed); each arrow is labelled with
    the events that can take it."""
    return str(_graph("mermaid").draw(None))  # type: ignore[attr-defined]


def dot() -> str:
    """`TABLE` as Graphviz DOT source; needs the `graphviz` package (ImportError)."""
    import graphviz  # type: ignore[import-untyped]  # noqa: F401  (imported lazily by transitions)

    return str(_graph("graphviz").source)  # type: ignore[attr-defined]
