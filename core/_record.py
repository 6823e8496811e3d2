"""What an observation writes to the ledger before anything is decided: its event, the
conversation it adds, the call it answers, and the counts it moves (usage, cost, the guards').

`record` is the one way in for an observation: it matches it against what the state waits for
(a `ProtocolError`, before anything is written, when it answers nothing) and writes it down.
The other writers here are what a step writes between its decisions (a round opened or
written, a compaction made, a refused answer), each named by a deciding method's plan, and what
`Step.apply` writes on a decision (a round closed early). Nothing here decides.
"""

from __future__ import annotations

__all__ = [
    "answer_refused",
    "close",
    "compaction_made",
    "record",
    "round_counted",
    "round_opened",
    "round_written",
    "run_started",
]

import sys
from collections.abc import Mapping, Set
from typing import Any

import msgspec
from msgspec import UNSET

from ._approval import edit, ran_edited
from ._compaction import compacted
from ._cost import Price
from ._errors import ProtocolError
from ._guards import STALL_PERIODS, Checks, estimate_tokens, message_tokens, part_tokens
from ._machine import COMPACTING, DONE, FINALIZING
from ._messages import (
    AssistantMessage,
    Part,
    ToolCall,
    ToolResult,
    ToolResults,
    Usage,
    UserMessage,
    text_of,
)
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
from ._round import INTERRUPTED
from ._spec import LoopSpec
from ._state import CallStatus, Compacted, LoopState, PendingCall, new_run
from ._tools import ToolSpec

_DONE, _QUEUED, _RUNNING, _STARTED, _APPROVAL = (  # read once: each lookup costs a call
    CallStatus.done,
    CallStatus.queued,
    CallStatus.running,
    CallStatus.started,
    CallStatus.approval,
)
_BUSY = frozenset({_RUNNING, _STARTED})
_SENT = frozenset({_RUNNING})
_ASKED = frozenset({_APPROVAL})
_NOT_RENAMED: dict[str, str] = {}


def record(
    st: LoopState, obs: Observation, spec: LoopSpec, tools: Mapping[str, ToolSpec]
) -> dict[str, str]:
    """Write `obs` (checked at the boundary) to the ledger, or raise `ProtocolError` when it
    answers nothing outstanding, leaving the state as it was. For a reply whose calls share an
    id, returns each renamed call's new id and the id it came with."""
    if type(obs) is ToolReturned:  # most frequent first: a reply's calls each return
        call_id = obs.call_id
        for p in st.round:  # (`_call`, inline: this runs once a call)
            if p.call.id == call_id and p.status in _BUSY:
                break
        else:
            p = _call(st, obs, _BUSY)  # raises
        st.events.append(obs)
        content = obs.content if p.original is None else ran_edited(obs.content, p.call)
        p.result = ToolResult(call_id, content, obs.is_error)
        p.status = _DONE
        if obs.usage is not UNSET or obs.cost is not UNSET:
            _spent(st, obs)
        return _NOT_RENAMED
    if type(obs) is ModelReplied:
        return _replied(st, obs, spec)
    match obs:
        case ToolStarted():
            p = _call(st, obs, _SENT)
            st.events.append(obs)
            p.status = _STARTED
        case ModelFailed():
            if obs.command_id != st.pending_model:
                raise _unmatched(st, obs)
            _answered(st, spec, obs)
        case Approved():
            p = _call(st, obs, _ASKED)
            edited = edit(p.call, obs.arguments, tools)  # raises for arguments that do not fit
            st.events.append(obs)
            _human_answered(st, obs.now)
            p.status = _QUEUED
            if edited is not None:
                p.call, p.original = edited, p.call
        case Denied():
            p = _call(st, obs, _ASKED)
            st.events.append(obs)
            _human_answered(st, obs.now)
            _resolve(p, f"denied by a human: {obs.reason or 'no reason given'}. Do not retry it.")
        case GuardrailChecked():
            _check_answered(st, obs)
        case Tick():
            st.events.append(obs)
        case Cancelled():
            st.events.append(obs)
            _human_answered(st, obs.now)
        case Resumed():  # another process goes on: settle the calls a crash interrupted
            st.events.append(obs)
            for p in st.round:
                if p.status is _STARTED:
                    tool = tools.get(p.call.name)
                    if tool is not None and tool.replay_safe:
                        p.status = _RUNNING
                    else:
                        _resolve(p, INTERRUPTED)
        case _:
            raise ProtocolError(f"{type(obs).__name__} is recorded by start(), never sent")
    return _NOT_RENAMED


def _replied(st: LoopState, obs: ModelReplied, spec: LoopSpec) -> dict[str, str]:
    """The model call outstanding is answered: the reply joins the conversation (or, asked for
    a summary, the summary is kept) and a turn is counted."""
    if obs.command_id != st.pending_model:
        raise _unmatched(st, obs)
    response = obs.response
    content = response.content
    reused = _NOT_RENAMED
    calls = 0
    for part in content:  # a plain loop: a comprehension costs a frame on 3.11
        if type(part) is ToolCall:
            calls += 1
    if calls > 1:
        content, reused = _renamed(content)
    command_id = st.pending_model
    models = spec.models
    if obs.model is None and models:  # (`_answered`, inline: this runs once a turn)
        obs = msgspec.structs.replace(obs, model=models[min(st.model_index, len(models) - 1)])
    st.events.append(obs)
    st.pending_model = st.retry_at = None
    usage = response.usage
    if st.retries:
        st.retries = 0
    total = st.usage  # (`Usage.__add__`, inline: this runs once a turn)
    st.usage = Usage(
        total.input_tokens + usage.input_tokens,
        total.output_tokens + usage.output_tokens,
        total.cache_read_tokens + usage.cache_read_tokens,
        total.cache_write_tokens + usage.cache_write_tokens,
        total.reasoning_tokens + usage.reasoning_tokens,
    )
    if spec.prices:
        price = _price(st, spec, obs.model)
        if price is not None:  # a float, so the state dumps: more than any budget
            st.cost = min(st.cost + price.of(usage), sys.float_info.max)
    reply = AssistantMessage(content)
    if st.phase is COMPACTING:  # the summary asked for came: later requests send it instead
        cut, st.summarizing = st.summarizing, None
        assert cut is not None
        last = st.compactions[-1] if st.compactions else None
        summary = text_of(reply.content) or None
        tokens = st.context_tokens
        made = compacted("summarize", st.messages, last, cut, tokens, summary, command_id)
        compaction_made(st, made)
        return reused
    st.messages.append(reply)
    if usage.input_tokens:
        st.context_tokens = usage.input_tokens + usage.output_tokens
    else:
        st.context_tokens += part_tokens(reply.content)
    if st.phase is not FINALIZING:
        st.turns += 1
    return reused


def _spent(st: LoopState, obs: ToolReturned) -> None:
    """A call that made model calls of its own (a sub-agent's run): their tokens and cost
    count in the run's totals (not in its context: the call's result is all the model reads)."""
    if obs.usage is not UNSET:
        st.usage = st.usage + obs.usage
    if obs.cost is not UNSET:
        st.cost = min(st.cost + obs.cost, sys.float_info.max)


def _answered(st: LoopState, spec: LoopSpec, obs: ModelReplied | ModelFailed) -> None:
    """The model call outstanding is answered by `obs`: it is recorded, saying which model
    answered (the executor's word, else the model asked), and no call is outstanding any
    more."""
    models = spec.models
    if obs.model is None and models:
        obs = msgspec.structs.replace(obs, model=models[min(st.model_index, len(models) - 1)])
    st.events.append(obs)
    st.pending_model = st.retry_at = None


def _price(st: LoopState, spec: LoopSpec, model: str | None) -> Price | None:
    """The price of a reply from `model`, else of the model asked (an executor may name it as
    the provider does, with a date)."""
    prices, models = spec.prices, spec.models
    price = prices.get(model) if model is not None else None
    if price is None and models:
        price = prices.get(models[min(st.model_index, len(models) - 1)])
    return price


def _unmatched(st: LoopState, obs: ModelReplied | ModelFailed) -> ProtocolError:
    return ProtocolError(
        f"{type(obs).__name__}(command_id={obs.command_id!r}) matches no outstanding "
        f"model call (outstanding: {st.pending_model!r})"
    )


def _call(
    st: LoopState, obs: Approved | Denied | ToolStarted | ToolReturned, want: Set[CallStatus]
) -> PendingCall:
    """The call of the round in flight that `obs` answers, whose status must be one of `want`;
    else a `ProtocolError` saying what the call is."""
    found = None
    for p in st.round:
        if p.call.id == obs.call_id:
            if p.status in want:
                return p
            found = p
    wanted = " or ".join(sorted(s.value for s in want))
    raise ProtocolError(
        f"{type(obs).__name__}(call_id={obs.call_id!r}) does not match a call that is "
        f"{wanted} (that call is {'unknown' if found is None else found.status.value})"
    )


def _check_answered(st: LoopState, obs: GuardrailChecked) -> None:
    """The guardrail check outstanding that `obs` answers is recorded; one that passed is no
    longer waited for (one that tripped stays, for the finish to name). Else `ProtocolError`."""
    checks = st.checks or []
    found = [i for i, check in enumerate(checks) if check.id == obs.check_id]
    if not found:
        raise ProtocolError(
            f"GuardrailChecked(check_id={obs.check_id!r}) matches no outstanding guardrail "
            f"check (outstanding: {', '.join(c.id for c in checks) or 'none'})"
        )
    st.events.append(obs)
    if not obs.tripped:
        del checks[found[0]]
        if not checks:
            st.checks = msgspec.UNSET


def _human_answered(st: LoopState, now: float) -> None:
    """A human answered at `now`: the time they took is not the run's."""
    if st.waiting_since is not None:
        st.waited_s += now - st.waiting_since
        st.waiting_since = None


def _renamed(content: list[Part]) -> tuple[list[Part], dict[str, str]]:
    """A reply whose calls share an id, each repeat given a fresh one so every result can say
    which call it answers: the content, and each new id's old one."""
    ids = {p.id for p in content if type(p) is ToolCall}
    if len(ids) == sum(type(p) is ToolCall for p in content):
        return content, _NOT_RENAMED
    seen: set[str] = set()
    parts: list[Part] = []
    reused: dict[str, str] = {}
    for part in content:
        if type(part) is ToolCall:
            if part.id in seen:
                n, new = 2, f"{part.id}_2"
                while new in ids:
                    n, new = n + 1, f"{part.id}_{n + 1}"
                ids.add(new)
                reused[new] = part.id
                part = msgspec.structs.replace(part, id=new)
            seen.add(part.id)
        parts.append(part)
    return parts, reused


def _resolve(p: PendingCall, error: str) -> None:
    p.status, p.result = _DONE, ToolResult(p.call.id, error, True)


# -- what a step writes between its decisions ------------------------------------------------


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


def round_opened(
    st: LoopState, round_: list[PendingCall], counts: dict[str, int], wrong_answers: int
) -> None:
    """A reply's calls become the round in flight; the repeated-calls guard's `counts` and
    the answers that failed `LoopSpec.output` are counted."""
    st.round = round_
    if counts:
        st.call_counts.update(counts)
    st.output_retries += wrong_answers


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
        content = r.content  # (`part_tokens` of ASCII text, inline: this runs once a call)
        if type(content) is str and content.isascii():
            tokens += (len(content) + 2) // 3
        else:
            tokens += part_tokens(content)
        failed = failed and r.is_error and r.content != INTERRUPTED  # a crash is no failure
        if finish is None and not r.is_error and call.name in finishers:
            finish = call
    st.messages.append(ToolResults(results))
    st.round = []
    st.context_tokens += tokens
    return digest, failed, finish


def round_counted(st: LoopState, checks: Checks, digest: object, failed: bool) -> None:
    """A written round counts for the failed-rounds and no-progress guards, which keep only
    the rounds they can still need."""
    st.failed_rounds = st.failed_rounds + 1 if failed else 0
    digests = st.round_digests
    digests.append(checks.round_key(digest))
    if checks.stall is not None and len(digests) > STALL_PERIODS * checks.stall:
        del digests[0]


def answer_refused(st: LoopState, problem: UserMessage | None) -> None:
    """A reply's answer failed `LoopSpec.output`: it counts, and the model reads `problem`
    (None: the run stops, past the retries allowed)."""
    st.output_retries += 1
    if problem is not None:
        st.messages.append(problem)


def compaction_made(st: LoopState, made: Compacted) -> None:
    """Requests leave out what `made` says from now on."""
    st.compactions.append(made)
    st.context_tokens = made.tokens_after


def close(st: LoopState, why: str, refused: list[ToolCall] | None = None) -> None:
    """End the round early (or, given `refused`, a reply's calls that will never run): every
    call still without a result gets an error result saying `why`, and the round is written,
    results first, so the history stays valid whatever is decided next."""
    if refused:
        st.round = [PendingCall(c, _QUEUED) for c in refused]
    if not st.round:
        return
    for p in st.round:
        if p.status is _RUNNING or p.status is _STARTED:
            _resolve(p, f"no result: {why} before this call returned")
        elif p.status is not _DONE:
            _resolve(p, f"not run: {why}")
    st.messages.append(ToolResults([p.result for p in st.round]))  # type: ignore[misc]
    st.round = []
