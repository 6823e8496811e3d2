"""A run as text a person reads: one block per turn, calls with arguments, results, usage."""

from __future__ import annotations

__all__ = ["transcript"]

import json
from collections.abc import Collection, Mapping, Sequence

from turnstile.core import (
    Approved,
    Cancelled,
    Denied,
    GuardrailChecked,
    LoopState,
    ModelFailed,
    ModelReplied,
    Started,
)
from turnstile.core.messages import (
    AssistantMessage,
    Instructions,
    Message,
    Opaque,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
    UserPart,
)
from turnstile.core.state import Compacted


def _usage(u: Usage) -> str:
    extra = [
        f"{n} {label}"
        for n, label in (
            (u.cache_read_tokens, "cache read"),
            (u.cache_write_tokens, "cache write"),
            (u.reasoning_tokens, "reasoning"),
        )
        if n
    ]
    return f"{u.input_tokens} in / {u.output_tokens} out" + "".join(f", {e}" for e in extra)


def _compacted(c: Compacted) -> str:
    span = f"messages {c.head + 1}–{c.upto}"
    done = f"tool results in {span} cleared" if c.strategy == "clear_tool_results" else span
    if c.strategy != "clear_tool_results":
        done += " left out"
    return (
        f"── compacted ({c.strategy}): {done} · "
        f"~{c.tokens_before:,} → ~{c.tokens_after:,} tokens ──"
    )


def _args(arguments: dict[str, object]) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def _shown(content: str | Sequence[UserPart]) -> str:
    """Text as it is; parts as their text, and a bracketed line for each of the others."""
    if isinstance(content, str):
        return content
    return "\n".join(p.text if type(p) is Text else _media(p) for p in content)


def _compact(content: str | Sequence[UserPart]) -> str | Sequence[UserPart]:
    """A result that is JSON on one line, as a local tool's dict is sent: an MCP server's
    pretty-printed JSON reads the same as the local tool's (other text as it is)."""
    if not isinstance(content, str) or "\n" not in content or content.lstrip()[:1] not in "{[":
        return content
    try:
        value = json.loads(content)
    except ValueError:
        return content
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _media(part: UserPart) -> str:
    if type(part) is Opaque:
        return f"[{part.format} {part.data.get('type', 'block')}]"
    kind = type(part).__name__.lower()
    data = getattr(part, "data", None)
    where = (
        f"{len(data):,} bytes"
        if data is not None
        else getattr(part, "url", None) or getattr(part, "file_id", None)
    )
    media = getattr(part, "media_type", None)
    return f"[{kind}{' ' + media if media else ''}, {where}]"


def _block(prefix: str, text: str | Sequence[UserPart]) -> list[str]:
    """`prefix` and `text`, each further line of the text indented two past the prefix's own
    indentation, so that it cannot be read as a line of its own."""
    first, *rest = _shown(text).split("\n")
    indent = " " * (len(prefix) - len(prefix.lstrip(" ")) + 2)
    return [prefix + first, *(indent + line for line in rest)]


class _Ledger:
    """Writes the state's messages out in order, each once, with the names of the calls."""

    def __init__(
        self, state: LoopState, served: Collection[str] = (), children: Mapping[str, str] = {}
    ) -> None:
        self.messages = state.messages
        self.served = served
        self.children = dict(children)  # each shown once, under the first call of its id
        self.next = 0
        self.names: dict[str, str] = {}
        self.lines: list[str] = []
        self.finalizing = False  # a prompt the loop added asks for the final answer
        self.turns = 0
        # compactions, each shown where it happened: before the message at its `at`, or, for a
        # summary, with the reply that wrote it
        self.compactions = {c.at: c for c in state.compactions if c.command_id is None}
        self.summaries = {c.command_id: c for c in state.compactions if c.command_id is not None}

    def flush(self) -> None:
        """Write what the loop added since the last reply (its results, a prompt to finish).

        The ledger does not say on which event each message came, so what is not a reply is
        written before the next reply, failed call, cancel or run; the approvals and denials of
        a round come before its results, since a round is written once all its calls are
        answered."""
        while True:
            compaction = self.compactions.pop(self.next, None)
            if compaction is not None:
                self.lines.append(_compacted(compaction))
            if self.next >= len(self.messages):
                return
            message = self.messages[self.next]
            if type(message) is AssistantMessage:
                return
            if type(message) is UserMessage:
                self.finalizing = True
            self.write(message)
            self.next += 1

    def started(self, messages: list[Message]) -> None:
        """Write the messages a run started from (found by value: a loaded state's events
        hold copies), and what came before them."""
        n = len(messages)
        at = self.next
        while at + n <= len(self.messages) and self.messages[at : at + n] != messages:
            at += 1
        if at + n > len(self.messages):
            return  # not in the ledger: written at the end, as they are
        while self.next < at:
            self.write(self.messages[self.next])
            self.next += 1
        for message in messages:
            if type(message) is AssistantMessage:
                self.lines.append("── given in the prompt ──")
            self.write(message)
        self.next += n

    def replied(self, reply: ModelReplied) -> None:
        self.flush()
        r = reply.response
        by = "" if reply.model is None else f" · {reply.model}"
        summary = self.summaries.get(reply.command_id)
        if summary is not None:  # not a turn: the summary stands for older turns from now on
            self.lines.append(f"── summary{by} · {_usage(r.usage)} ──")
            self.lines += _block("summary: ", summary.summary or "")
            self.lines.append(_compacted(summary))
            return
        if self.finalizing:
            head, self.finalizing = "── final answer", False
        else:
            self.turns += 1
            head = f"── turn {self.turns}"
        self.lines.append(f"{head} · {r.stop.value} · {_usage(r.usage)}{by} ──")
        if self.next < len(self.messages):
            self.write(self.messages[self.next])
            self.next += 1

    def write(self, message: Message) -> None:
        lines = self.lines
        match message:
            case UserMessage(content=content):
                lines += _block("user: ", content)
            case AssistantMessage(content=parts):
                for part in parts:
                    match part:
                        case Text(text=text):
                            lines += _block("assistant: ", text)
                        case Thinking(text=text, redacted=redacted):
                            lines += _block("thinking: ", "[redacted]" if redacted else text)
                        case Opaque():
                            lines += _block("assistant: ", [part])
                        case ToolCall(id=call_id, name=name) as call:
                            self.names[call_id] = name
                            shown = call.raw_arguments or _args(call.arguments)
                            cut = "" if call.complete else " [cut off]"
                            lines += _block(f"  → {name} ", shown + cut)
                            child = self.children.pop(call_id, None)
                            if child is not None:  # a sub-agent's run, under its call
                                lines += [f"    │ {line}" for line in child.split("\n")]
            case ToolResults(results=results):
                for result in results:
                    mark = "✗" if result.is_error else "←"
                    recorded = " (recorded)" if result.call_id in self.served else ""
                    head = f"  {mark} {self.name(result.call_id)}{recorded}: "
                    lines += _block(head, _compact(result.content))
            case Instructions(text=text, role=role):
                lines += _block(f"{role}: ", text)

    def name(self, call_id: str) -> str:
        return self.names.get(call_id, call_id)


def transcript(
    state: LoopState, served: Collection[str] = (), children: Mapping[str, str] = {}
) -> str:
    """Render a state (finished or not) in the order things happened: each turn's reply with its
    stop and usage, its calls, the approvals and denials they got, their results; failed model
    calls, guardrail checks and a cancel where they came. The results of the calls in `served`
    (a fork's, answered from its parent's log: `Fork.served`) are marked "(recorded)".
    `children`: the transcripts of sub-agents' runs, by call id, each shown under its call
    (`Run.transcript` gives them)."""
    ledger = _Ledger(state, served, children)
    lines = ledger.lines
    for event in state.events:
        match event:
            case Started(messages=messages):
                ledger.started(messages)
            case ModelReplied():
                ledger.replied(event)
            case ModelFailed(command_id=cid, message=msg, retryable=retryable, model=model):
                ledger.flush()
                to = "" if model is None else f" to {model}"
                kind = "retryable" if retryable else "final"
                lines += _block(f"! {cid}{to} failed ({kind}): ", msg)
            case Approved(call_id=cid, arguments=None):
                lines.append(f"  ✓ approved {ledger.name(cid)} ({cid})")
            case Approved(call_id=cid, arguments=dict() as edited):
                lines += _block(f"  ✓ approved {ledger.name(cid)} ({cid}), edited: ", _args(edited))
            case Denied(call_id=cid, reason=reason):
                lines += _block(f"  ✗ denied {ledger.name(cid)} ({cid}): ", reason)
            case Cancelled(reason=reason):
                ledger.flush()
                lines += _block("! cancelled: ", reason)
            case GuardrailChecked(check_id=cid, tripped=True, message=msg):
                lines += _block(f"  ✗ guardrail {cid} tripped: ", msg or "no reason given")
            case GuardrailChecked(check_id=cid):
                lines.append(f"  ✓ guardrail {cid} passed")
    ledger.flush()
    for message in state.messages[ledger.next :]:  # only if the events do not account for it
        ledger.write(message)
    waiting = [p.call for p in state.outstanding]
    if waiting:
        calls = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        lines.append(f"── {state.phase}: waiting on {calls}")
    elif state.phase != "done":
        lines.append(f"── {state.phase}")
    else:
        turns = f"{ledger.turns} turn{'' if ledger.turns == 1 else 's'}"
        cost = f" · cost {state.cost:.4f}" if state.cost else ""
        lines.append(f"── {state.stop_reason.value} after {turns} · {_usage(state.usage)}{cost} ──")
    return "\n".join(lines)
