"""A run as text a person reads: one block per turn, calls with arguments, results, usage."""

from __future__ import annotations

__all__ = ["transcript"]

import json

from turnstile.core import (
    Approved,
    AssistantMessage,
    Cancelled,
    Denied,
    LoopState,
    ModelFailed,
    ModelReplied,
    Text,
    Thinking,
    ToolCall,
    ToolResults,
    Usage,
    UserMessage,
)


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


def _args(arguments: dict[str, object]) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def transcript(state: LoopState) -> str:
    """Render a state (finished or not): the ledger, with each reply's stop and usage."""
    replies = iter([e for e in state.events if type(e) is ModelReplied])
    names: dict[str, str] = {}
    lines: list[str] = []
    turn = 0
    for message in state.messages:
        match message:
            case UserMessage(content=content):
                lines.append(f"user: {content}")
            case AssistantMessage(content=parts):
                reply = next(replies, None)
                turn += 1
                head = f"── turn {turn}"
                if reply is not None:
                    r = reply.response
                    head += f" · {r.stop.value} · {_usage(r.usage)}"
                lines.append(head + " ──")
                for part in parts:
                    match part:
                        case Text(text=text):
                            lines.append(f"assistant: {text}")
                        case Thinking(text=text, redacted=redacted):
                            lines.append("thinking: " + ("[redacted]" if redacted else text))
                        case ToolCall(id=call_id, name=name) as call:
                            names[call_id] = name
                            shown = (
                                call.raw_arguments if call.raw_arguments else _args(call.arguments)
                            )
                            cut = "" if call.complete else " [cut off]"
                            lines.append(f"  → {name} {shown}{cut}")
            case ToolResults(results=results):
                for result in results:
                    mark = "✗" if result.is_error else "←"
                    name = names.get(result.call_id, result.call_id)
                    lines.append(f"  {mark} {name}: {result.content}")
    for event in state.events:
        match event:
            case ModelFailed(command_id=cid, message=msg, retryable=retryable):
                lines.append(f"! {cid} failed ({'retryable' if retryable else 'final'}): {msg}")
            case Approved(call_id=cid):
                lines.append(f"✓ approved {names.get(cid, cid)} ({cid})")
            case Denied(call_id=cid, reason=reason):
                lines.append(f"✗ denied {names.get(cid, cid)} ({cid}): {reason}")
            case Cancelled(reason=reason):
                lines.append(f"! cancelled: {reason}")
    waiting = [p.call for p in state.outstanding]
    if waiting:
        calls = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        lines.append(f"── {state.phase}: waiting on {calls}")
    elif state.phase != "done":
        lines.append(f"── {state.phase}")
    else:
        lines.append(
            f"── {state.stop_reason.value} after {state.turns} turns · {_usage(state.usage)} ──"
        )
    return "\n".join(lines)
