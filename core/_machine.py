"""Everything that decides which phase the loop is in lives here, in two tables.

Theory of operation: the loop is always in one phase. An observation is legal only if
`ACCEPTS[phase]` lists its type; anything else is a `ProtocolError` and changes nothing. Handling
a legal observation ends in one of the triggers below, and `TRANSITIONS` (a `transitions`
table, built once at import) says where that trigger leads from the current phase. The hot path
reads the same table through `NEXT`, a plain dict, instead of firing a `transitions` trigger per
observation (about 12 µs each), and a trigger the table does not list for a phase is a bug.
"""

from __future__ import annotations

__all__ = ["ACCEPTS", "NEXT", "PHASES", "TRANSITIONS", "dot", "mermaid"]

from typing import Literal

from transitions import Machine

from ._observations import (
    Approved,
    Cancelled,
    Denied,
    ModelFailed,
    ModelReplied,
    Tick,
    ToolReturned,
)

PHASES = ["idle", "awaiting_model", "awaiting_tools", "awaiting_approval", "finalizing", "done"]
_WORKING = ["awaiting_model", "awaiting_tools", "awaiting_approval"]

TRANSITIONS: list[dict[str, object]] = [
    # the conversation is handed over: ask the model
    {"trigger": "start", "source": "idle", "dest": "awaiting_model"},
    # a reply's batch has calls that may run now (or an approval let one run)
    {"trigger": "run_tools", "source": _WORKING, "dest": "awaiting_tools"},
    # nothing can run until a human answers
    {"trigger": "await_approval", "source": _WORKING, "dest": "awaiting_approval"},
    # the batch is resolved, a retry is due, or the model paused: ask again
    {"trigger": "ask_model", "source": _WORKING, "dest": "awaiting_model"},
    # a budget guard tripped: one last call without tools
    {"trigger": "finalize", "source": _WORKING, "dest": "finalizing"},
    {"trigger": "retry_finalize", "source": "finalizing", "dest": "finalizing"},
    # a stop reason is known
    {"trigger": "finish", "source": ["idle", *_WORKING, "finalizing"], "dest": "done"},
]

ACCEPTS: dict[str, frozenset[type]] = {
    "idle": frozenset({Cancelled}),
    "awaiting_model": frozenset({ModelReplied, ModelFailed, Tick, Cancelled}),
    "awaiting_tools": frozenset({ToolReturned, Approved, Denied, Tick, Cancelled}),
    "awaiting_approval": frozenset({Approved, Denied, Tick, Cancelled}),
    "finalizing": frozenset({ModelReplied, ModelFailed, Tick, Cancelled}),
    "done": frozenset(),
}

_MACHINE = Machine(
    model=None,
    states=PHASES,
    transitions=TRANSITIONS,
    initial="idle",
    auto_transitions=False,
)

NEXT: dict[tuple[str, str], str] = {
    (source, trigger): str(t.dest)
    for trigger, event in _MACHINE.events.items()
    for source, ts in event.transitions.items()
    for t in ts
}


def _graph(engine: Literal["graphviz", "mermaid"]) -> object:
    from transitions.extensions.diagrams import GraphMachine

    machine = GraphMachine(
        states=PHASES,
        transitions=TRANSITIONS,
        initial="idle",
        auto_transitions=False,
        graph_engine=engine,
        title="turnstile loop",
    )
    return machine.get_graph()


def mermaid() -> str:
    """The table above drawn as a Mermaid state diagram (no graphviz needed)."""
    return str(_graph("mermaid").draw(None))  # type: ignore[attr-defined]


def dot() -> str:
    """The table above as Graphviz DOT source; needs the `graphviz` package (ImportError)."""
    import graphviz  # type: ignore[import-untyped]  # noqa: F401  (imported lazily by transitions)

    return str(_graph("graphviz").source)  # type: ignore[attr-defined]
