"""The request of the next model call, as the spec and the state make it: the conversation so
far, the tools offered and whether one must be called, caching, and the answer's shape."""

from __future__ import annotations

__all__ = ["cache_key", "request"]

import hashlib
from collections.abc import Sequence

import msgspec

from ._commands import ModelRequest, Purpose
from ._guards import canonical
from ._history import History
from ._observations import Event, Started
from ._output import Output
from ._spec import LoopSpec
from ._state import LoopState
from ._tools import ToolSpec


def cache_key(events: Sequence[Event]) -> str:
    """A conversation's cache key, drawn from its first event but not its time nor its tools:
    every run over it (and every recording and replay of it, whatever the clock, wherever its
    tools came from) sends the same, and other conversations another."""
    first: Event | None = events[0] if events else None
    if type(first) is Started:
        first = msgspec.structs.replace(first, tools=())
    data = b"" if first is None else canonical.encode(msgspec.structs.replace(first, now=0.0))
    return "turnstile-" + hashlib.blake2b(data, digest_size=12).hexdigest()


def request(
    spec: LoopSpec,
    st: LoopState,
    offered: Sequence[ToolSpec],
    output: Output | None,
    key: str | None,
) -> ModelRequest:
    """The next request. Finalizing, it offers no tools: the answer must come from what is
    known."""
    cache = spec.cache if spec.cache.enabled else None
    history = History(st.messages, len(st.messages))
    final = st.phase == "finalizing"
    return ModelRequest(
        spec.system,
        history,
        () if final else offered,
        spec.max_tokens,
        Purpose.finalize if final else Purpose.turn,
        "auto" if final or output is None else output.tool_choice(st.messages[-1]),
        spec.server_tools,
        cache,
        key if cache is not None else None,
        None if output is None else output.format,
    )
