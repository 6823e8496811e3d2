"""What an observation writes to the ledger before anything is decided: its event, the
conversation it adds, and the counts it moves (usage, cost, the model call it answers)."""

from __future__ import annotations

__all__ = [
    "compaction_made",
    "model_answered",
    "round_written",
    "run_started",
    "summary_written",
]

import sys
from typing import Any

import msgspec

from ._compaction import compacted
from ._cost import Price
from ._guards import estimate_tokens, message_tokens, part_tokens
from ._machine import DONE
from ._messages import ToolCall, ToolResult, ToolResults, Usage
from ._observations import Started
from ._round import INTERRUPTED
from ._spec import LoopSpec
from ._state import Compacted, LoopState, new_run


def run_started(st: LoopState, spec: LoopSpec, event: Started) -> None:
    """A run begins on `event`: a finished loop's run counts start again, and the conversation
    joins the ledger."""
    if st.phase is DONE:
        new_run(st)
    else:
        st.context_tokens = estimate_tokens(spec.system or "")
    st.events.append(event)
    st.messages.extend(event.messages)
    st.started_at = event.now
    st.context_tokens += sum(message_tokens(m) for m in event.messages)


def model_answered(st: LoopState, spec: LoopSpec, obs: Any, usage: Usage | None = None) -> Any:
    """The model call outstanding is answered by `obs` (a reply, with its `usage`, or a
    failure): it is recorded, saying which model answered, no call is outstanding any more, and
    a reply's cost is counted whatever is decided next."""
    models = spec.models
    if obs.model is None and models:  # the executor's word, else the model asked
        obs = msgspec.structs.replace(obs, model=models[min(st.model_index, len(models) - 1)])
    st.events.append(obs)
    st.pending_model = st.retry_at = None
    if usage is None:
        return obs
    if st.retries:
        st.retries = 0
    st.usage = st.usage + usage
    if spec.prices:
        price = _price(st, spec, obs.model)
        if price is not None:  # a float, so the state dumps: more than any budget
            st.cost = min(st.cost + price.of(usage), sys.float_info.max)
    return obs


def _price(st: LoopState, spec: LoopSpec, model: str | None) -> Price | None:
    """The price of a reply from `model`, else of the model asked (an executor may name it as
    the provider does, with a date)."""
    prices, models = spec.prices, spec.models
    price = prices.get(model) if model is not None else None
    if price is None and models:
        price = prices.get(models[min(st.model_index, len(models) - 1)])
    return price


def round_written(
    st: LoopState, finishers: frozenset[str]
) -> tuple[list[tuple[Any, ...]], bool, ToolCall | None]:
    """Every call of the round has its result: write them in call order and close the round.
    Returns what the guards count of it (its digest, whether every call failed) and the first
    call of a finishing tool that succeeded."""
    results: list[ToolResult] = []
    digest = []
    tokens = 0
    failed = True
    finish: ToolCall | None = None
    for p in st.round:
        call, r = p.call, p.result
        assert r is not None
        results.append(r)
        digest.append((call.name, call.arguments, r.content, r.is_error))
        tokens += part_tokens(r.content)
        failed = failed and r.is_error and r.content != INTERRUPTED  # a crash is no failure
        if finish is None and not r.is_error and call.name in finishers:
            finish = call
    st.messages.append(ToolResults(results))
    st.round = []
    st.context_tokens += tokens
    return digest, failed, finish


def compaction_made(st: LoopState, record: Compacted) -> None:
    """Requests leave out what `record` says from now on."""
    st.compactions.append(record)
    st.context_tokens = record.tokens_after


def summary_written(st: LoopState, summary: str, command_id: str) -> None:
    """The summary asked for came: later requests send it instead of the older turns."""
    cut, st.summarizing = st.summarizing, None
    assert cut is not None
    last = st.compactions[-1] if st.compactions else None
    tokens = st.context_tokens
    compaction_made(
        st, compacted("summarize", st.messages, last, cut, tokens, summary or None, command_id)
    )
