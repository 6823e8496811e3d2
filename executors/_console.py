"""What `turnstile run` and `turnstile show --follow` print: a run's text as it streams, its tool
calls, and a status line (turn, tokens, cost, tool calls). On a terminal with `rich` installed
(`pip install 'turnstile[cli]'`) the status line stays at the bottom, redrawn as the run goes;
elsewhere the text goes to stdout as it comes and the rest, status lines included, to stderr.
"""

from __future__ import annotations

__all__ = ["Display", "Mirror", "follow", "live_terminal", "status"]

import json
import sys
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from turnstile.core import AwaitApproval, Event, Loop, LoopState, Started, ToolReturned, ToolSpec
from turnstile.providers import TextDelta

from ._effects import Edit
from ._events import (
    ApprovalNeeded,
    ModelCallFailed,
    ModelCallFinished,
    ModelCallStarted,
    ModelRetry,
    ToolCallFinished,
    ToolCallStarted,
    Update,
)
from ._journal import Journal, TornJournal
from ._transcript import transcript


class Mirror:
    """A loop fed a run's events one at a time, as `Loop.replay` feeds them: the state a status
    line reads, the run's own being out of reach. `tool_calls` counts the results recorded."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.tool_calls = sum(type(e) is ToolReturned for e in loop.state.events)

    def feed(self, event: Event) -> None:
        if type(event) is Started:
            self.loop.start(event.messages, event.now, event.tools)
        else:
            self.loop.send(event)  # type: ignore[arg-type]
        self.tool_calls += type(event) is ToolReturned


def status(state: LoopState, tool_calls: int, priced: bool) -> str:
    """One line: the turn (the one the model is answering, while it does), the tokens, the cost
    (when the spec prices its models), the tool calls."""
    usage = state.usage
    turn = state.turns + (state.phase == "awaiting_model")
    cost = f"cost {state.cost:.4f}" if priced else "cost n/a"
    calls = f"{tool_calls} tool call{'' if tool_calls == 1 else 's'}"
    tokens = f"{usage.input_tokens:,} in / {usage.output_tokens:,} out"
    return f"turn {turn} · {tokens} · {cost} · {calls}"


def _typed(question: str) -> str:
    """A line typed in answer to `question` (none at the end of the input)."""
    try:
        return input(question).strip()
    except EOFError:
        return ""


def _asking(command: AwaitApproval) -> str:
    """Who asks, for a sub-agent's request: "sub-agent research (call a1) asks: "."""
    via = getattr(command, "via", ())  # a `ChildApproval`'s
    if not via:
        return ""
    return " › ".join(f"sub-agent {name} (call {call_id})" for name, call_id in via) + " asks: "


def _shown(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class Display:
    """Shows one run: `update` and `event` are its `on_update` and `on_event`. `live` (a
    terminal with rich) keeps the status line at the bottom of `out`; else text goes to `out`
    and the rest to `err`. Use it as a context manager, around the run."""

    def __init__(self, mirror: Mirror, *, priced: bool, out: IO[str], err: IO[str], live: bool):
        self.mirror = mirror
        self.priced = priced
        self.out, self.err = out, err
        self._streamed = False  # the current reply's text came as deltas
        self._column = 0  # characters on the current line of text, which is not ended yet
        self._schemas: dict[str, dict[str, Any]] = {}  # each call asked about: its tool's schema
        self._live: Any = None
        if live:
            from rich.console import Console
            from rich.live import Live

            console = Console(
                file=out, force_terminal=True, highlight=False, markup=False, emoji=False
            )
            self._live = Live(console=console, auto_refresh=False, transient=True)
            self._partial = ""

    def __enter__(self) -> Display:
        if self._live is not None:
            self._live.start()
            self._redraw()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end_text()
        if self._live is not None:
            self._live.stop()
            if self.mirror.loop.state.events:  # the status line, kept once the run is over
                self.note(self.line())

    def line(self) -> str:
        return status(self.mirror.loop.state, self.mirror.tool_calls, self.priced)

    def update(self, update: Update | object) -> None:
        match update:
            case ModelCallStarted():
                self._streamed = False
            case TextDelta(text=text):
                self._streamed = True
                self._text(text)
            case ModelCallFinished(text=text):
                if not self._streamed and text:
                    self._text(text)
                self._end_text()
                if self._live is None:
                    self.note(f"[{self.line()}]")
            case ApprovalNeeded(call_id=call_id, parameters=parameters):
                self._schemas[call_id] = parameters
            case ToolCallStarted(name=name, arguments=arguments):
                self.note(f"  → {name} {_shown(arguments)}")
            case ToolCallFinished(name=name, content=content, is_error=is_error):
                self.note(f"  {'✗' if is_error else '←'} {name}: {_shown(content)}")
            case ModelCallFailed(message=message):
                self.note(f"  ! the model call failed: {_shown(message)}")
            case ModelRetry(attempt=attempt):
                self.note(f"  ! retry {attempt}")
        self._redraw()

    def ask(self, command: AwaitApproval) -> bool | str | Edit:
        """Ask, on the terminal, whether the call may run (`approve=`): yes, no (or no answer),
        edit (its arguments, as JSON that fits the tool's schema), or why not (a denial's
        reason, which the model is told)."""
        self._end_text()
        if self._live is not None:
            self._live.stop()
        try:
            asks = _asking(command)
            question = (
                f"  ? {asks}run {command.name} {_shown(command.arguments)}? [y/N/edit/why not] "
            )
            answer = _typed(question)
            if answer.lower() in ("e", "edit"):
                return self._edit(command)
        finally:
            if self._live is not None:
                self._live.start()
        if answer.lower() in ("y", "yes"):
            return True
        return False if answer.lower() in ("", "n", "no") else answer

    def _edit(self, command: AwaitApproval) -> bool | Edit:
        """The arguments to run the call with, asked until they fit the tool's schema (no
        answer: the call is denied)."""
        tool = getattr(command, "tool", None)  # a sub-agent's request brings its tool
        if tool is None:
            tool = ToolSpec(command.name, parameters=self._schemas.get(command.id, {}))
        while text := _typed("    arguments (JSON): "):
            try:
                arguments = json.loads(text)
            except ValueError as e:
                problem: str | None = f"not JSON: {e}"
            else:
                problem = tool.arguments_problem(arguments)
            if problem is None:
                return Edit(arguments)
            print(f"    {problem}", file=self.out, flush=True)
        return False

    def event(self, event: Event) -> None:
        self.mirror.feed(event)
        self._redraw()

    def note(self, line: str) -> None:
        """A line of its own, under the text so far (which it ends)."""
        self._end_text()
        if self._live is not None:
            self._live.console.print(line, style="dim")
        else:
            print(line, file=self.err, flush=True)

    def _text(self, text: str) -> None:
        if self._live is None:
            self.out.write(text)
            self.out.flush()
            self._column = (
                len(text.rpartition("\n")[2]) if "\n" in text else self._column + len(text)
            )
            return
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._live.console.print(line)
        self._column = len(self._partial)

    def _end_text(self) -> None:
        if self._live is None:
            if self._column:
                self.out.write("\n")
                self.out.flush()
        elif self._partial:
            self._live.console.print(self._partial)
            self._partial = ""
        self._column = 0

    def _redraw(self) -> None:
        if self._live is None:
            return
        from rich.console import Group
        from rich.text import Text

        shown = [Text(self._partial)] if self._partial else []
        self._live.update(Group(*shown, Text(self.line(), style="reverse")), refresh=True)


def live_terminal(out: IO[str]) -> bool:
    """Whether to draw a live status line: `out` is a terminal and rich is installed."""
    if not out.isatty():
        return False
    try:
        import rich  # noqa: F401  # `pip install 'turnstile[cli]'`
    except ImportError:
        return False
    return True


def follow(
    path: Path,
    loop: Loop,
    out: IO[str] | None = None,
    poll: float = 0.2,
) -> None:
    """Print the transcript of the run the journal at `path` holds, and go on printing what
    is added to it, every `poll` seconds, until the run is done (`loop`: a fresh loop of its
    spec). A torn tail is a record being written: it is read once whole."""
    out = sys.stdout if out is None else out
    mirror = Mirror(loop)
    printed = seen = 0
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TornJournal)
            events = Journal.read(path)
        for event in events[seen:]:
            mirror.feed(event)
        seen = len(events)
        lines = transcript(loop.state).splitlines()
        done = loop.state.phase == "done"
        body = lines if done else lines[:-1]  # the last line says where the run is: not yet
        for line in body[printed:]:
            print(line, file=out, flush=True)
        printed = len(body)
        if done:
            return
        time.sleep(poll)
