"""Plain `logging` of a run, under the logger `turnstile.run`: its start, a model call that
failed (and whether it is retried), a tool call that ended in an error result, its finish.

Names, ids, counts, times and reasons: never what the model or a tool said, nor a prompt. The
traceback of a tool that raised is logged where it is caught, under `turnstile.tools`. Records go
where the application sends them, and nowhere by default (`turnstile`'s `NullHandler`).
"""

from __future__ import annotations

__all__ = ["logged"]

import logging
from collections.abc import Sequence

from turnstile.core import Event, Loop, ModelFailed, Resumed, Started, ToolReturned
from turnstile.core.messages import AssistantMessage, ToolCall

from ._invoke import logger

log = logger("turnstile.run")


def _tool_name(loop: Loop, call_id: str) -> str:
    for message in reversed(loop.state.messages):
        if type(message) is AssistantMessage:
            for part in message.content:
                if type(part) is ToolCall and part.id == call_id:
                    return part.name
            break
    return "?"


def logged(loop: Loop, events: Sequence[Event]) -> None:
    """Log what `events`, just recorded by `loop`, say of the run."""
    if not log.isEnabledFor(logging.INFO):
        return
    st = loop.state
    for event in events:
        match event:  # the most frequent first
            case ToolReturned(call_id=call_id, is_error=True):
                name = _tool_name(loop, call_id)
                log.info("tool call %s (%s) ended in an error result", call_id, name)
            case ModelFailed():
                _failed(st.pending_model, st.retries, st.retry_at, event)
            case Started(messages=messages, tools=given):
                log.info(
                    "run started: %d new messages, %s",
                    len(messages),
                    f"{len(given)} tools given" if given else "the spec's tools",
                )
            case Resumed():
                log.info("run resumed in phase %s", st.phase)
    if events and st.phase == "done":
        log.info(
            "run finished: %s after %d turns, %d input and %d output tokens",
            *(st.stop_reason.value, st.turns, st.usage.input_tokens, st.usage.output_tokens),
        )


def _failed(retry: str | None, retries: int, at: float | None, event: ModelFailed) -> None:
    what = f"{event.kind or 'error'}: {event.message}"
    if retry is None:
        log.warning("model call %s failed (%s)", event.command_id, what)
        return
    wait = max((at if at is not None else event.now) - event.now, 0.0)
    log.warning(
        "model call %s failed (%s); retry %d as %s in %.3g s",
        *(event.command_id, what, retries, retry, wait),
    )
