"""A run as one self-contained HTML page (`turnstile view`): a timeline of its turns, each
request and reply, tool calls with their results, tokens and cost, and the command that forks
the run at each event. Runs that share a prefix of events are drawn as branches of one tree.

The page fetches nothing (a Content-Security-Policy allows only its own inline style and script,
by their hashes) and every string from a run is escaped, so no tool result can add markup or
script to it. The run is replayed event by event to recover what only the loop knows: the
requests it made, retries and fallbacks, compactions, running totals.
"""

from __future__ import annotations

__all__ = ["Branch", "page", "parent_of", "write_page"]

import html
import shlex
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec
from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Cancelled,
    Command,
    Denied,
    Event,
    Finish,
    Loop,
    LoopSpec,
    LoopState,
    ModelFailed,
    ModelReplied,
    Resumed,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
    TurnstileError,
)
from turnstile.core.messages import (
    AssistantMessage,
    Instructions,
    Message,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    UserMessage,
)

from ._assets import CSP, CSS, HEAD, JS
from ._journal import MAGIC, CorruptJournal, Journal, TornJournal, child_path, header_record
from ._transcript import _args, _compact, _compacted, _shown, _usage


class Branch(NamedTuple):
    """One run's events under a label. `source`: the file the fork commands name; `parent`:
    what a forked journal says of the run it came from, shown as it is given; `spec`: the
    run's own, if not the page's."""

    label: str
    events: Sequence[Event]
    source: str | None = None
    parent: Mapping[str, object] | None = None
    spec: LoopSpec | None = None


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pre(text: str, cls: str = "") -> str:
    return f'<pre class="{cls}">{_e(text)}</pre>' if cls else f"<pre>{_e(text)}</pre>"


def _json(value: object) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _shared(a: Sequence[Event], b: Sequence[Event]) -> int:
    """How many events two runs share from their start."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Writer:
    """Writes one branch: replays its events, grouping what they led to into cards, one a
    model call (with its retries and fallbacks), after a card for the run's start."""

    def __init__(self, b: int, branch: Branch, spec: LoopSpec, shared: int, key: str = "") -> None:
        self.b, self.branch, self.shared = b, branch, shared
        self.key = key or f"b{b}"  # what its events' ids begin with
        self.at = 0  # the event of the reply whose parts are being written
        self.loop: Loop | None = Loop(spec)
        self.priced = bool(spec.prices)
        self.out: list[str] = []
        self.rows: list[str] = []
        self.card: tuple[str, str] | None = None  # (class, title) of the card being written
        self.last = -1  # the last event the card holds
        self.names: dict[str, str] = {}
        self.turns = 0
        self.sent = 0  # the ledger's length at the last request
        self.system: str | None = None
        self.request: CallModel | None = None
        self.failed = False  # the last model call failed: the next is a retry or a fallback
        self.compactions = 0
        self.marks: dict[int, list[str]] = {}  # event index → notes of the branches leaving there
        source = branch.source or branch.label
        self.fork = f"turnstile fork {shlex.quote(source)} --at {{}} -o {{}}"
        self.stem = Path(source).stem

    def money(self, cost: float) -> str:
        """What a cost reads as, where the spec prices its models."""
        return f" · cost {cost:.4f}" if self.priced else ""

    # -- cards -------------------------------------------------------------------------------

    def begin(self, cls: str, title: str) -> None:
        self.end()
        self.card, self.rows = (cls, title), []

    def end(self) -> None:
        """Write the card out, unless it holds only events the branch shares with another."""
        if self.card is None or (self.last < self.shared and self.b > 0):
            self.card = None
            return
        cls, title = self.card
        self.out.append(f'<article class="card {cls}"><h3>{_e(title)}</h3><ol>')
        self.out += self.rows
        self.out.append("</ol></article>")
        self.card = None

    def row(self, i: int | None, cls: str, body: str) -> None:
        if i is None:
            self.rows.append(f'<li class="{cls}">{body}</li>')
            return
        self.last = i
        for note in self.marks.get(i, ()):  # a branch leaving before this event
            self.rows.append(f'<li class="mark">{note}</li>')
        ev = self.branch.events[i]
        t = ev.now - self.branch.events[0].now
        shared = " sh" if i < self.shared else ""
        self.rows.append(
            f'<li class="ev {cls}{shared}" id="{self.key}-e{i}"><span class="n">#{i}</span>'
            f'<span class="t">+{t:.1f}s</span>{body}'
            f'<code class="fk" title="a new run from the events before this one">'
            f"{_e(self.fork.format(i, shlex.quote(f'{self.stem}-at-{i}.journal')))}</code></li>"
        )

    # -- the replay --------------------------------------------------------------------------

    def write(self) -> list[str]:
        events = self.branch.events
        for i, event in enumerate(events):
            before = self.loop.state.cost if self.loop else 0.0
            commands = self.step(i, event)
            self.event(i, event, before)
            for command in commands:
                self.command(command)
        for at in sorted(k for k in self.marks if k >= len(events)):  # after its last event
            self.rows += [f'<li class="mark">{note}</li>' for note in self.marks[at]]
        state = self.loop.state if self.loop else None
        if state is None or state.phase != "done":
            waits = [f"{p.call.name} ({p.call.id})" for p in state.outstanding] if state else []
            where = f"phase {state.phase if state else '?'}"
            where += f", waiting on {', '.join(waits)}" if waits else ""
            self.row(None, "end", f"<b>not finished</b>: {_e(where)}")
        self.last = max(self.last, self.shared)  # the last card shows where a branch stands
        self.end()
        return self.out

    def step(self, i: int, event: Event) -> list[Command]:
        """Feed the event to the loop; if it refuses, say so and show the rest as recorded."""
        loop = self.loop
        if loop is None:
            return []
        try:
            if type(event) is Started:
                return loop.start(event.messages, event.now, event.tools)
            return loop.send(event)  # type: ignore[arg-type]
        except TurnstileError as e:
            self.loop = None
            self.begin("err", f"the replay stops at event #{i}")
            self.row(None, "err", _e(f"{type(e).__name__}: {e}"))
            return []

    def event(self, i: int, event: Event, cost_before: float) -> None:
        state = self.loop.state if self.loop else None
        match event:
            case Started(messages=messages, tools=tools):
                self.failed = False  # a new run: its first call is no retry
                self.begin("start", "start")
                names = ", ".join(t.name for t in tools) or "none"
                body = "".join(self.message(m) for m in messages)
                self.row(i, "started", f"<b>started</b> · tools: {_e(names)}{body}")
                self.sent = len(state.messages) if state else len(messages)
            case ModelReplied():
                self.replied(i, event, state, cost_before)
            case ModelFailed(command_id=cid, message=msg, retryable=retryable, status=status):
                self.failed = True
                said = ("retryable" if retryable else "final", event.kind, status, event.model)
                kind = ", ".join(f"HTTP {x}" if x == status else str(x) for x in said if x)
                self.row(i, "fail", f"<b>{_e(cid)} failed</b> ({_e(kind)}): {_pre(msg)}")
            case ToolStarted(call_id=cid):
                self.row(i, "tool", f"started {self.call(cid)}")
            case ToolReturned(call_id=cid, content=content, is_error=error):
                cls, word = ("terr", "error from") if error else ("res", "result of")
                shown = _shown(_compact(content))
                spent = "" if event.usage is msgspec.UNSET else f" · spent {_usage(event.usage)}"
                spent += "" if event.cost is msgspec.UNSET else f" · cost {event.cost:.4f}"
                self.row(i, cls, f"{word} {self.call(cid)}{_e(spent)} {_pre(shown)}")
            case Approved(call_id=cid, arguments=edited):
                to = "" if edited is None else f", edited: {_pre(_args(edited))}"
                self.row(i, "ok", f"<b>approved</b> {self.call(cid)}{to}")
            case Denied(call_id=cid, reason=reason):
                self.row(i, "deny", f"<b>denied</b> {self.call(cid)}: {_e(reason)}")
            case Cancelled(reason=reason):
                self.row(i, "fail", f"<b>cancelled</b>: {_e(reason)}")
            case Resumed():
                self.row(i, "note", "<b>resumed</b> by a new process")
            case Tick():
                self.row(i, "note", "tick")
        if state is not None and len(state.compactions) > self.compactions:
            for c in state.compactions[self.compactions :]:
                self.row(None, "cmp", _e(_compacted(c).strip("─ ")))
            self.compactions = len(state.compactions)

    def replied(self, i: int, ev: ModelReplied, state: LoopState | None, before: float) -> None:
        r = ev.response
        self.failed = False
        model = ev.model or (self.request.request.model if self.request else None)
        cost = self.money((state.cost - before) if state else 0.0)
        total = f" · so far {_usage(state.usage)}{self.money(state.cost)}" if state else ""
        head = (
            f"<b>reply</b>{' · ' + _e(model) if model else ''} · {_e(r.stop.value)}"
            f'<span class="tok">this call {_e(_usage(r.usage))}{cost}{_e(total)}</span>'
        )
        self.at = i
        self.row(i, "reply", head + "".join(self.part(p) for p in r.content))

    def child(self, cid: str) -> str:
        """A sub-agent's run under its call (`as_tool`), from its journal beside this run's
        (`child_path`), in a fold of its own."""
        if self.branch.source is None:
            return ""
        path = child_path(Path(self.branch.source), self.at, cid)
        try:
            events = _read(path) if path.is_file() else []
        except (OSError, TurnstileError):
            return f"<p>sub-agent run: {_e(path.name)} does not read</p>"
        key = f"{self.key}-{self.at}-{cid}"
        writer = _Writer(0, Branch(path.name, events, str(path)), LoopSpec(), 0, key)
        inner = "".join(writer.write()) if events else ""
        title = f"sub-agent run · {_totals(writer)} · {path.name}"
        return f'<details class="sub"><summary>{_e(title)}</summary>{inner}</details>' * bool(inner)

    def command(self, command: Command) -> None:
        match command:
            case CallModel(id=cid, not_before=not_before):
                self.requested(command, cid, not_before)
            case AwaitApproval(id=cid, name=name):
                self.row(None, "ask", f"<b>awaits approval</b>: {_e(name)} ({_e(cid)})")
            case Finish(reason=reason, output=output):
                shown = "" if output is None else _pre(msgspec.json.encode(output).decode())
                self.row(None, "end", f"<b>finished</b>: {_e(reason.value)}{shown}")

    def requested(self, command: CallModel, cid: str, not_before: float | None) -> None:
        req = command.request
        previous, self.request = self.request, command
        if previous is not None and previous.id == cid:  # handed out again on a resume
            self.row(None, "retry", f"<b>request {_e(cid)} sent again</b> by the new process")
            return
        if self.failed and previous is not None:
            again = (
                "retry"
                if req.model == previous.request.model
                else f"fallback to {req.model or 'the client’s model'}"
            )
            wait = "" if not_before is None else f" · not before +{not_before - self.t0:.1f}s"
            self.row(None, "retry", f"<b>{_e(again)}</b>{_e(wait)}")
            self.failed = False
        elif req.purpose == "turn":
            self.turns += 1
            self.begin("turn", f"turn {self.turns}")
        else:
            self.begin(
                req.purpose.value, "final answer" if req.purpose == "finalize" else "summary"
            )
        state = self.loop.state if self.loop else None
        ledger = state.messages if state else []
        detail = []
        if req.system is not None and req.system != self.system:
            detail.append(f"<b>system</b>{_pre(req.system)}")
            self.system = req.system
        for m in ledger[self.sent :]:
            if type(m) is UserMessage or type(m) is Instructions:
                detail.append(self.message(m))
        self.sent = len(ledger)
        tools = ", ".join(t.name for t in req.tools) or "none"
        detail.append(f"<p>tools: {_e(tools)} · choice {_e(req.tool_choice)}</p>")
        n = len(req.messages)
        cut = f" of {len(ledger)}" if n < len(ledger) else ""
        head = (
            f"<b>request</b> {_e(cid)}{' → ' + _e(req.model) if req.model else ''} · "
            f"{n}{cut} message{'' if n == 1 else 's'} · max {req.max_tokens} tokens"
        )
        self.row(None, "req", f"<details><summary>{head}</summary>{''.join(detail)}</details>")

    @property
    def t0(self) -> float:
        return self.branch.events[0].now

    # -- parts -------------------------------------------------------------------------------

    def call(self, cid: str) -> str:
        return f"<b>{_e(self.names.get(cid, '?'))}</b> <span class=id>({_e(cid)})</span>"

    def message(self, m: Message) -> str:
        match m:
            case UserMessage(content=content):
                return f'<div class="msg"><b>user</b>{_pre(_shown(content))}</div>'
            case Instructions(text=text, role=role):
                return f'<div class="msg"><b>{_e(role)}</b>{_pre(text)}</div>'
            case AssistantMessage(content=parts):
                inner = "".join(self.part(p) for p in parts)
                return f'<div class="msg"><b>assistant (given)</b>{inner}</div>'
        return f'<div class="msg"><b>{_e(type(m).__name__)}</b></div>'

    def part(self, p: object) -> str:
        match p:
            case Text(text=text):
                return _pre(text, "txt")
            case Thinking(text=text, redacted=redacted):
                shown = "[redacted]" if redacted else text
                return f"<details><summary>thinking</summary>{_pre(shown)}</details>"
            case ToolCall(id=cid, name=name) as call:
                self.names[cid] = name
                cut = "" if call.complete else " [cut off]"
                args = (call.raw_arguments or _args(call.arguments)) + cut
                return f'<div class="call">call {self.call(cid)}{_pre(args)}{self.child(cid)}</div>'
            case Opaque():
                return _pre(_shown([p]))
        return _pre(repr(p))


def _totals(writer: _Writer) -> str:
    if writer.loop is None:
        return "does not replay"
    state = writer.loop.state
    cost = f" · cost {state.cost:.4f}" if state.cost else ""
    end = state.stop_reason.value if state.phase == "done" else str(state.phase)
    return f"{end} · {state.turns} turns · {_usage(state.usage)}{cost}"


def page(branches: Sequence[Branch], spec: LoopSpec) -> str:
    """The HTML page of one run, or of several drawn as branches: each after the first is
    shown from where it leaves the earlier one it shares most events with."""
    if not branches:
        raise ValueError("a page shows at least one run")
    forks: list[tuple[int, int]] = [(-1, 0)]  # per branch: (the branch it leaves, where)
    for j, branch in enumerate(branches[1:], 1):
        at, of = max((_shared(branches[k].events, branch.events), k) for k in range(j))
        forks.append((of, at))
    writers = [_Writer(j, br, br.spec or spec, forks[j][1]) for j, br in enumerate(branches)]
    for j, (of, at) in enumerate(forks[1:], 1):
        note = f'↳ <a href="#b{j}">{_e(branches[j].label)}</a> leaves here'
        writers[of].marks.setdefault(at, []).append(note)
    sections = []
    for j, (writer, (of, at)) in enumerate(zip(writers, forks, strict=True)):
        since = f" · from event #{at}, after {at} shared with {branches[of].label}" if j else ""
        sections.append(
            f'<section class="branch" id="b{j}"><h2>{_e(writer.branch.label + since)}</h2>'
        )
        sections += writer.write()
        sections.append("</section>")
    overview = []
    for j, (writer, (of, at)) in enumerate(zip(writers, forks, strict=True)):
        br = writer.branch
        left = f'<a href="#b{of}">{_e(branches[of].label)}</a> at #{at}' if of >= 0 else ""
        parent = "".join(f"<br>{_e(k)}: {_e(_json(v))}" for k, v in (br.parent or {}).items())
        overview.append(
            f'<tr><td><a href="#b{j}">{_e(br.label)}</a></td><td>{len(br.events)}</td>'
            f"<td>{_e(_totals(writer))}</td><td>{left}{parent}</td></tr>"
        )
    body = [
        HEAD.format(title=_e(branches[-1].label), css=CSS, csp=CSP),
        f"<header><h1>{_e(branches[-1].label)}</h1>",
        '<table class="ov"><tr><th>run</th><th>events</th><th>end</th><th>forked from</th></tr>',
        *overview,
        "</table>",
        '<p class="tools"><input id="q" type="search" placeholder="filter the turns">'
        ' <button id="all" type="button">expand all</button></p></header><main>',
        *sections,
        f"</main><script>{JS}</script></body></html>\n",
    ]
    return "\n".join(body)


def parent_of(path: Path) -> dict[str, object] | None:
    """What a fork's journal (schema 2) says of its parent: the JSON of the record after its
    header (`_journal`'s format); None for a dump, or a journal that is no fork."""
    data = path.read_bytes()
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        return None
    try:
        header, _ = header_record(data, path)
    except CorruptJournal:
        return None
    value = None if header is None else msgspec.json.decode(header)
    return value if isinstance(value, dict) else None


def _read(path: Path) -> list[Event]:
    with warnings.catch_warnings():  # a torn tail: the events before it
        warnings.simplefilter("ignore", TornJournal)
        return Journal.read(path)


def write_page(output: str | Path, runs: Sequence[tuple[Loop, str]]) -> None:
    """Write the page of runs (each a loop and the file it was read from) as branches; a
    fork's journal comes after the parent its header names, found beside it, if not given."""
    given = {Path(source).resolve() for _, source in runs}
    branches: list[Branch] = []
    for loop, source in runs:
        path = Path(source)
        parent = parent_of(path)
        if parent is not None and isinstance(parent.get("path"), str):
            found = path.parent / str(parent["path"])
            try:
                if found.resolve() not in given:
                    events = _read(found)
                    branches.append(Branch(found.name, events, str(found), spec=loop.spec))
            except (OSError, TurnstileError):
                parent["parent"] = f"not found: {found}" if not found.exists() else "damaged"
        branches.append(Branch(path.name, loop.state.events, source, parent, loop.spec))
    Path(output).write_text(page(branches, runs[0][0].spec), encoding="utf-8")
