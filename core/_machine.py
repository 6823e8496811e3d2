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
    compact   the conversation nears the context window: ask the model to summarize its older
              turns (`Compaction(strategy="summarize")`; the other strategies need no call)
    finish    the run is over
"""

from __future__ import annotations

__all__ = ["ACCEPTS", "MACHINE", "NEXT", "PHASES", "TABLE", "dot", "mermaid", "trigger"]

from typing import Literal

from transitions import Machine

from ._observations import (
    Approved,
    Cancelled,
    Denied,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)

PHASES = (
    "idle",
    "awaiting_model",
    "awaiting_tools",
    "awaiting_approval",
    "compacting",
    "finalizing",
    "done",
)
IDLE, MODEL, TOOLS, APPROVAL, COMPACTING, FINALIZING, DONE = PHASES

# a budget can run out (or the deadline pass) whatever happened, and a run can always end
_OUT = {"finalize": FINALIZING, "finish": DONE}
# before each turn the loop may first have the older turns summarized
_TURN = {"ask": MODEL, "compact": COMPACTING}

TABLE: dict[str, dict[type[Observation], dict[str, str]]] = {
    IDLE: {
        Started: {**_TURN, "finish": DONE},
        Cancelled: {"finish": DONE},
    },
    MODEL: {
        ModelReplied: {"run": TOOLS, "approve": APPROVAL, **_TURN, **_OUT},
        ModelFailed: {"ask": MODEL, **_OUT},
        Tick: {"wait": MODEL, **_OUT},
        Resumed: {"wait": MODEL, **_OUT},
        Cancelled: {"finish": DONE},
    },
    TOOLS: {
        ToolStarted: {"wait": TOOLS},
        ToolReturned: {"run": TOOLS, "approve": APPROVAL, **_TURN, **_OUT},
        Approved: {"run": TOOLS, **_OUT},
        Denied: {"run": TOOLS, **_OUT},
        Tick: {"wait": TOOLS, **_OUT},
        Resumed: {"run": TOOLS, "approve": APPROVAL, **_TURN, **_OUT},
        Cancelled: {"finish": DONE},
    },
    APPROVAL: {  # only a human can move it on: its time is not the run's, no deadline falls
        Approved: {"run": TOOLS, "approve": APPROVAL},
        Denied: {"run": TOOLS, "approve": APPROVAL, **_TURN, **_OUT},
        Tick: {"wait": APPROVAL},
        Resumed: {"approve": APPROVAL},
        Cancelled: {"finish": DONE},
    },
    COMPACTING: {  # the summary is written: on to the turn (or another summary, or a stop)
        ModelReplied: {**_TURN, **_OUT},
        ModelFailed: {"compact": COMPACTING, **_OUT},
        Tick: {"wait": COMPACTING, **_OUT},
        Resumed: {"wait": COMPACTING, **_OUT},
        Cancelled: {"finish": DONE},
    },
    FINALIZING: {
        ModelReplied: {"finish": DONE},
        ModelFailed: {"ask": FINALIZING, "finish": DONE},
        Tick: {"wait": FINALIZING},
        Resumed: {"wait": FINALIZING},
        Cancelled: {"finish": DONE},
    },
    DONE: {  # a new run on the same conversation
        Started: {**_TURN, "finish": DONE},
    },
}

ACCEPTS: dict[str, frozenset[type[Observation]]] = {
    phase: frozenset(events) for phase, events in TABLE.items()
}
"""The events each phase takes; `Started` only through `Loop.start`."""


def trigger(event: type[Observation], decision: str) -> str:
    """The name of a move in the `transitions` machine."""
    return f"{event.__name__}_{decision}"


_MOVES = {
    trigger(event, decision): (event, decision)
    for events in TABLE.values()
    for event, decisions in events.items()
    for decision in decisions
}
_TRANSITIONS = sorted(  # cancelling last, so the diagram draws the main flow first
    (
        {"trigger": trigger(event, decision), "source": phase, "dest": after}
        for phase, events in TABLE.items()
        for event, decisions in events.items()
        for decision, after in decisions.items()
    ),
    key=lambda t: t["trigger"] == trigger(Cancelled, "finish"),
)

MACHINE = Machine(
    model=None, states=list(PHASES), transitions=_TRANSITIONS, initial=IDLE, auto_transitions=False
)
"""`TABLE` as a `transitions` machine: one trigger per move, named by `trigger()`."""

NEXT: dict[tuple[str, type[Observation], str], str] = {
    (source, *_MOVES[name]): str(t.dest)
    for name, event in MACHINE.events.items()
    for source, moves in event.transitions.items()
    for t in moves
}
"""The machine's moves, (phase, event, decision) -> next phase: the loop's moves, which the
tests walk the loop against."""


def _graph(engine: Literal["graphviz", "mermaid"]) -> object:
    from transitions.extensions.diagrams import GraphMachine

    drawn = GraphMachine(
        states=list(PHASES),
        # each arrow is labelled with the events that take it, not with every move's name
        transitions=[{**t, "label": _MOVES[t["trigger"]][0].__name__} for t in _TRANSITIONS],
        initial=IDLE,
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
