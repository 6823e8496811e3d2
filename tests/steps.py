"""How a snapshot shows a run, in every test: its steps, one a line (`→` a command out of the
loop, `←` an observation into it), a blank line, then the run's transcript (what
`turnstile.executors.transcript` writes: the conversation, turn by turn)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from turnstile.core import (
    Approved,
    AwaitApproval,
    CallModel,
    Cancelled,
    CheckGuardrail,
    Command,
    Denied,
    Finish,
    GuardrailChecked,
    LoopState,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    RunTool,
    Started,
    Tick,
    ToolReturned,
    ToolStarted,
)
from turnstile.core.messages import (
    AssistantMessage,
    Document,
    Image,
    Opaque,
    Text,
    Thinking,
    ToolCall,
)
from turnstile.executors import transcript

__all__ = ["run_log", "step_line"]


def call_ids(messages: Sequence[Any]) -> list[str]:
    """The ids of the tool calls in `messages`' replies, in order."""
    return [
        p.id
        for m in messages
        if type(m) is AssistantMessage
        for p in m.content
        if type(p) is ToolCall
    ]


def _args(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def _part(part: Any, *, quote_texts: bool) -> str:
    match part:
        case Text(text=text):
            return f"text {text!r}" if quote_texts else "text"
        case Thinking(redacted=redacted):
            return "thinking (redacted)" if redacted else "thinking"
        case ToolCall(id=call_id, name=name, arguments=arguments, raw_arguments=raw):
            shown = f"raw {raw!r}" if raw is not None else _args(arguments)
            return f"{name}#{call_id} {shown}" + ("" if part.complete else " [cut off]")
        case Opaque(format=format, data=data):
            return f"{format} {data.get('type')}"
        case Image(url=url, media_type=media_type) | Document(url=url, media_type=media_type):
            return f"{type(part).__name__.lower()} {url or media_type}"
    raise AssertionError(part)


def _counted(n: int, tools: Sequence[Any]) -> str:
    names = ", ".join(t.name for t in tools) or "none"
    return f"{n} message{'' if n == 1 else 's'}, tools: {names}"


def step_line(step: Command | Observation, *, quote_texts: bool = False) -> str:
    """One command or observation as a line; reply texts are left to the transcript unless
    `quote_texts` asks for them. Only a tick and a resume, whose time is all they say, show it."""
    match step:
        case Started(messages=messages, tools=tools):
            return f"← started {_counted(len(messages), tools)}"
        case CallModel(id=cid, request=request):
            return f"→ call_model {cid} [{request.purpose.value}] " + _counted(
                len(request.messages), request.tools
            )
        case ModelReplied(command_id=cid, response=response):
            u = response.usage
            raw = f" ({response.raw_stop})" if response.raw_stop else ""
            parts = "; ".join(_part(p, quote_texts=quote_texts) for p in response.content)
            parts = parts or "nothing"
            usage = f"{u.input_tokens} in / {u.output_tokens} out"
            return f"← model_replied {cid}: {response.stop.value}{raw} · {usage} · {parts}"
        case ModelFailed(command_id=cid, message=message, retryable=retryable):
            return f"← model_failed {cid} ({'retryable' if retryable else 'final'}): {message}"
        case RunTool(id=call_id, name=name, arguments=arguments):
            return f"→ run_tool {name}#{call_id} {_args(arguments)}"
        case AwaitApproval(id=call_id, name=name, arguments=arguments):
            return f"→ await_approval {name}#{call_id} {_args(arguments)}"
        case ToolStarted(call_id=call_id):
            return f"← tool_started {call_id}"
        case CheckGuardrail(id=check_id):
            return f"→ check_guardrail {check_id}"
        case GuardrailChecked(check_id=check_id, tripped=tripped, message=message):
            return f"← guardrail_checked {check_id}: " + (
                f"tripped: {message}" if tripped else "passed"
            )
        case ToolReturned(call_id=call_id, content=content, is_error=is_error):
            if not isinstance(content, str):
                content = "; ".join(_part(p, quote_texts=True) for p in content)
            return f"← tool_returned {call_id}{' (error)' if is_error else ''}: {content}"
        case Approved(call_id=call_id):
            return f"← approved {call_id}"
        case Denied(call_id=call_id, reason=reason):
            return f"← denied {call_id}: {reason}"
        case Cancelled(reason=reason):
            return f"← cancel: {reason}"
        case Tick(now=now):
            return f"← tick @{now}"
        case Resumed(now=now):
            return f"← resumed @{now}"
        case Finish(reason=reason):
            return f"→ finish {reason.value}"
    raise AssertionError(step)


def run_log(steps: Sequence[str], state: LoopState) -> str:
    """The snapshot of a run: its step lines, a blank line, its transcript."""
    return "\n".join([*steps, "", transcript(state)])
