"""The model side of a simulation from a recorded trace, and a client asked once per turn: a
reply learned once serves every seed, every retry and every resume (a replayed trace can
serve each exchange only once, and a simulation asks again and again)."""

from __future__ import annotations

__all__ = ["TraceTools", "by_turn_once", "from_trace", "turn_of"]

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnstile.core import ModelRequest, ToolContext, ToolOutcome
from turnstile.core.messages import AssistantMessage, ModelResponse


def turn_of(request: ModelRequest) -> int:
    """Which turn a request asks for: the assistant messages it holds."""
    return sum(type(m) is AssistantMessage for m in request.messages)


_LEARNED: weakref.WeakKeyDictionary[object, dict[int, ModelResponse]] = weakref.WeakKeyDictionary()
"""The replies each client gave, by turn, for as long as the client lives: a simulation run
again (a replay, a shrink, a benchmark's repeat) asks it nothing it has answered."""


def by_turn_once(client: Any) -> Callable[[ModelRequest], ModelResponse]:
    """`client.complete`, asked at most once per turn: its reply kept and given again."""
    complete: Callable[[ModelRequest], ModelResponse] = client.complete
    try:
        replies = _LEARNED.setdefault(client, {})
    except TypeError:  # a client that cannot be referred to weakly: kept for this call only
        replies = {}

    def reply(request: ModelRequest) -> ModelResponse:
        turn = turn_of(request)
        if turn not in replies:
            replies[turn] = complete(request)
        return replies[turn]

    return reply


class TraceTools:
    """A trace's recorded tool outputs, by call id: the same output however often a call runs
    (a replay-safe call run again after a crash)."""

    def __init__(self, loop: dict[str, Any], specs: tuple[Any, ...]) -> None:
        self.specs = specs
        self._outputs: dict[str, Any] = loop.get("tool_outputs", {})

    def run(
        self, name: str, arguments: dict[str, Any], *, context: ToolContext | None = None
    ) -> ToolOutcome:
        output = None if context is None else self._outputs.get(context.call_id)
        if output is None:
            return ToolOutcome(f"the trace has no recorded output for this call of {name}", True)
        return ToolOutcome(output["content"], output.get("is_error", False))


def from_trace(trace: Any) -> tuple[Callable[[ModelRequest], ModelResponse], Any, Any, Any, Any]:
    """A trace's model (its client over the replayed SDK, asked once per turn), its tools, its
    spec, its prompt, and the client with its `FaultyTransport` (for faults at the wire)."""
    from turnstile.providers.replay import Trace, load_trace, prompt_for, spec_for

    from ._wirefaults import traced_client

    if not isinstance(trace, Trace):
        trace = load_trace(Path(trace))
    spec = spec_for(trace)
    client, transport = traced_client(trace)
    assert trace.loop is not None  # spec_for has checked it
    return (
        by_turn_once(client),
        TraceTools(trace.loop, spec.tools),
        spec,
        prompt_for(trace),
        (client.complete, transport),
    )
