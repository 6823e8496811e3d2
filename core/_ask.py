"""The request of the next model call, as the spec and the state make it: the conversation so
far, the tools offered and whether one must be called, caching, and the answer's shape."""

from __future__ import annotations

__all__ = ["Requests", "cache_key", "summary_request"]

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from ._commands import ModelRequest, Purpose
from ._compaction import DEFAULT_SUMMARY_PROMPT, rewrite
from ._guards import canonical
from ._history import History
from ._machine import FINALIZING
from ._messages import Message, UserMessage
from ._observations import Event, Started
from ._output import Output
from ._request import ToolChoice
from ._spec import LoopSpec
from ._state import Compacted, LoopState
from ._tools import ToolSpec

_TURN, _FINALIZE = Purpose.turn, Purpose.finalize  # read once: each lookup costs a call


def cache_key(events: Sequence[Event]) -> str:
    """A conversation's cache key, drawn from its first event but not its time nor its tools:
    every run over it (and every recording and replay of it, whatever the clock, wherever its
    tools came from) sends the same, and other conversations another."""
    first: Event | None = events[0] if events else None
    if type(first) is Started:
        first = msgspec.structs.replace(first, tools=())
    data = b"" if first is None else canonical.encode(msgspec.structs.replace(first, now=0.0))
    return "turnstile-" + hashlib.blake2b(data, digest_size=12).hexdigest()


def summary_request(
    spec: LoopSpec,
    offered: Sequence[ToolSpec],
    messages: list[Message],
    prompt: str,
    key: str | None,
    model: str | None,
) -> ModelRequest:
    """The request for a summary of `messages` (older turns, ending on their results): the
    conversation as sent so far, then `prompt`. It offers the turn's tools but lets none be
    called, so it begins as the turns' requests did and a prompt cache serves that part."""
    cache = spec.cache if spec.cache.enabled else None
    return ModelRequest(
        spec.system,
        [*messages, UserMessage(prompt)],
        offered,
        spec.max_tokens,
        Purpose.summarize,
        "none",
        spec.server_tools,
        cache,
        key if cache is not None else None,
        None,
        model,
    )


class Requests:
    """Makes each request of a loop, keeping what requests send once the conversation was
    compacted: derived from the state's last compaction, kept between requests and extended as
    the ledger grows (so a provider's cache of its wire form holds), rebuilt after a new
    compaction or a load."""

    __slots__ = ("_cache", "_key", "_view", "_view_n", "_view_of", "spec")

    def __init__(self, spec: LoopSpec) -> None:
        self.spec = spec
        self._cache = spec.cache if spec.cache.enabled else None
        self._key: str | None = spec.cache.key
        self._view: list[Message] = []
        self._view_of: Compacted | None = None
        self._view_n = 0

    def next(
        self, st: LoopState, offered: Sequence[ToolSpec], output: Output | None
    ) -> ModelRequest:
        """The request of the model call `st` asks for next: the conversation so far (the
        ledger, or what compaction makes of it) to the model asked. Finalizing, it offers no
        tools: the answer must come from what is known."""
        spec, cache = self.spec, self._cache
        if self._key is None and cache is not None:
            self._key = cache_key(st.events)
        key = None if cache is None else self._key
        models = spec.models
        model = models[min(st.model_index, len(models) - 1)] if models else None
        if st.summarizing is not None:
            older = self._sent(st, st.summarizing)
            # a loaded state may be summarizing under a spec that no longer compacts
            policy = spec.compaction
            prompt = DEFAULT_SUMMARY_PROMPT if policy is None else policy.prompt
            return summary_request(spec, offered, older, prompt, self._key, model)
        messages = st.messages
        sent = History(messages, len(messages)) if not st.compactions else self._sent(st, None)
        choice: ToolChoice = "auto"
        if st.phase is FINALIZING:
            offered, purpose = (), _FINALIZE
        else:
            purpose = _TURN
            if output is not None:
                choice = output.tool_choice(messages[-1])
        return ModelRequest(
            spec.system,
            sent,
            offered,
            spec.max_tokens,
            purpose,
            choice,
            spec.server_tools,
            cache,
            key,
            None if output is None else output.format,
            model,
        )

    def _sent(self, st: LoopState, upto: int | None) -> Any:
        """What a request sends of the ledger (up to `upto`, else all of it): the ledger itself
        as an O(1) `History`, or, once compacted, the rewrite the last compaction makes."""
        messages = st.messages
        if not st.compactions:
            return History(messages, len(messages)) if upto is None else messages[:upto]
        last = st.compactions[-1]
        if upto is not None:
            return rewrite(messages, last, upto)
        if self._view_of is not last:
            self._view, self._view_of = rewrite(messages, last, len(messages)), last
        else:
            self._view += messages[self._view_n :]
        self._view_n = len(messages)
        return History(self._view, len(self._view))
