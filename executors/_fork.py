"""`fork`: a new run from any event of a recorded one, one thing changed, the rest served from
the parent's log while the fork stays on its track.

`fork` cuts the parent's events at a point (an index, `turn:N`, `call:ID`): the fork is their
fold up to there. Into a journal it copies the parent's records as they are (no event decoded,
nothing replayed: a fork of a long run costs a copy) behind a header record naming the parent
(`Parent`: its path, run id, the point, a digest of the records before it) and the change.
`Recorded` (`_served`) answers the fork's work from the parent's log after the point.
"""

from __future__ import annotations

__all__ = ["fork"]

import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict, Unpack, overload

import msgspec
from turnstile.core import (
    Event,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelReplied,
    Started,
    ToolOutcome,
    ToolSpec,
)
from turnstile.core.messages import Message, ResultPart, ToolCall, UserMessage

from ._effects import Edit
from ._journal import FORKED, MAGIC, _write_all
from ._lineage import Change, Parent, Policy, Source, point, record, unchanged_past
from ._served import Fork, forked_loop

_encode = msgspec.json.Encoder().encode


class Changes(TypedDict, total=False):
    """What `fork` may change, by keyword (one thing, as a rule)."""

    prompt: str | Sequence[Message] | None
    model: str | None
    system: str | None
    results: Mapping[str, str | list[ResultPart] | ToolOutcome] | None
    approvals: Mapping[str, bool | str | Edit] | None
    policy: Policy


def _change(given: Changes) -> Change:
    unknown = sorted(given.keys() - Changes.__annotations__.keys())
    if unknown:
        raise TypeError(f"fork() got unexpected keyword arguments: {', '.join(unknown)}")
    prompt, policy = given.get("prompt"), given.get("policy", "recorded")
    results = given.get("results") or {}
    for call_id, answer in (given.get("approvals") or {}).items():
        if not isinstance(answer, bool | str | Edit):
            raise TypeError(
                f"approvals[{call_id!r}] is True, False, a reason (str) or an Edit, "
                f"not {type(answer).__name__}"
            )
    return Change(
        prompt=prompt if prompt is None or isinstance(prompt, str) else list(prompt),
        model=given.get("model"),
        system=given.get("system"),
        results={
            k: v if isinstance(v, ToolOutcome) else ToolOutcome(v) for k, v in results.items()
        },
        approvals=dict(given.get("approvals") or {}),
        policy=policy if isinstance(policy, str) else "recorded",
    )


Forked = Loop | bytes | str | os.PathLike[str]


@overload
def fork(
    parent: Forked, at: int | str | None = None, *, spec: LoopSpec | None = None,
    journal: None = None, **change: Unpack[Changes],
) -> Fork: ...  # fmt: skip
@overload
def fork(
    parent: Forked, at: int | str | None = None, *, spec: LoopSpec | None = None,
    journal: str | os.PathLike[str], **change: Unpack[Changes],
) -> None: ...  # fmt: skip
def fork(
    parent: Forked,
    at: int | str | None = None,
    *,
    spec: LoopSpec | None = None,
    journal: str | os.PathLike[str] | None = None,
    **changes: Unpack[Changes],
) -> Fork | None:
    """A new run cut from `parent` (a `Loop`, a dump's bytes, or a journal's path) before the
    event `at` (an index, `"turn:N"`, `"call:ID"`; None: the one call `results` or `approvals`
    names): its state is the fold of the events before it, and one thing changes (`prompt`,
    `model`, `system`, `results`, `approvals`; another spec: run the fork with it). An
    approval's answer may be an `Edit`: the call runs with its arguments, which must fit the
    tool's schema (else `InvalidObservation`, as for `Approved(arguments=)`, nothing written).

    Run it with any executor (`loop=` the fork, or `journal=` the fork's journal): while it
    stays on the parent's track, each model call, tool call and approval whose place and
    request equal the parent's is answered from the parent's log (`policy`: `"recorded"` serves
    every such call, `"replay_safe"` runs replay-safe tools again, a function asks per call);
    from the first reply, result or answer that differs, it runs live.

    With `journal=`, the fork is written there (nothing is replayed: the parent's records are
    copied behind a header naming it) and None is returned; else the fork's loop. `spec` is the
    parent's, needed for a dump (and a journal forked into a loop). Raises `ValueError` for a
    point the run does not have, `CorruptJournal` for a damaged parent.
    """
    change = _change(changes)
    policy = changes.get("policy", "recorded")
    events: Sequence[Event] | None = None
    if isinstance(parent, Loop):
        events, spec = parent.state.events, spec or parent.spec
    elif isinstance(parent, bytes):
        if spec is None:
            raise ValueError("forking a dump needs its spec (spec=)")
        events = Loop.load(spec, parent).state.events
    source = Source.of_events(events) if events is not None else Source.of_journal(Path(parent))  # type: ignore[arg-type]
    index = point(at, change, source)
    unchanged_past(change, source, index)
    _check_edits(change, source, spec)
    source.check(index + 1)  # what is copied, and the event a fork may begin with
    begins = source.has(index) and source.kind(index) == "started"
    first = source.event(index) if begins else None
    if journal is not None:
        if source.path is not None and Path(journal).resolve() == source.path.resolve():
            raise ValueError("a fork cannot be written over its parent: give another path")
        if not isinstance(policy, str):
            raise ValueError("a journal cannot hold a function: fork into a loop to ask")
        _write(Path(journal), source, index, change, first)
        return None
    if events is None:
        events = [source.event(i) for i in range(len(source))]
    return forked_loop(spec or LoopSpec(), events, index, change, policy)


def _check_edits(change: Change, source: Source, spec: LoopSpec | None) -> None:
    """Each `Edit` among the answers fits its call's tool's schema (the spec's tools, else
    those the run's last start before the call recorded), else `InvalidObservation`, as the
    loop refuses it."""
    edits = {k: v.arguments for k, v in change.approvals.items() if type(v) is Edit}
    given = {t.name: t for t in spec.tools} if spec is not None and spec.tools else None
    recorded: dict[str, ToolSpec] = {}
    calls: dict[str, tuple[str, dict[str, ToolSpec]]] = {}  # by id: its tool's name, the tools
    i = 0
    while edits and source.has(i):  # the events are decoded only for an edit
        kind = source.kind(i)
        if kind in ("started", "model_replied"):
            event = source.event(i)
            if type(event) is Started:
                recorded = {t.name: t for t in event.tools}
            elif type(event) is ModelReplied:
                made = [p for p in event.response.content if type(p) is ToolCall]
                calls.update((p.id, (p.name, recorded)) for p in made if p.id in edits)
        i += 1
    for call_id, arguments in edits.items():
        name, tools = calls.get(call_id, ("", {}))
        tool = (tools if given is None else given).get(name)
        if tool is None:
            raise ValueError(
                f"the spec given has no tool {name!r} to check the edit of call {call_id!r}"
                if given is not None
                else f"no tool of call {call_id!r} known to check its edit: give spec="
            )
        problem = tool.arguments_problem(arguments)
        if problem is not None:
            where, _, what = problem.partition(": ")
            raise InvalidObservation(
                f"the edited arguments of {name} ({call_id}) do not fit its schema: {what}",
                path="arguments" if where == "arguments" else f"arguments.{where}",
            )


def _write(path: Path, source: Source, index: int, change: Change, first: Event | None) -> None:
    """The fork's journal: a schema 2 header, the header record, the parent's records before
    the point, and the `Started` it begins with (its prompt changed, if it is); written
    whole, synced, then renamed into place."""
    own: list[bytes] = []
    if first is not None:
        assert type(first) is Started
        if change.prompt is not None:
            prompt = change.prompt
            messages = prompt if isinstance(prompt, list) else [UserMessage(prompt)]
            first = msgspec.structs.replace(first, messages=messages)
            change = msgspec.structs.replace(change, prompt=None)
        own.append(record(_encode(first)))
    where = None
    if source.path is not None:
        where = os.path.relpath(source.path.resolve(), path.resolve().parent)
    header = Parent(
        path=where,
        run=source.run(),
        index=index,
        digest=source.digest(index),
        own=len(own),
        change=change,
    )
    head = MAGIC + struct.pack("<I", FORKED) + record(_encode(header))
    data: list[bytes | memoryview] = [head, source.records(0, index), *own]
    temporary = path.with_name(f".{path.name}.forking")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0))
    try:
        _write_all(fd, b"".join(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
