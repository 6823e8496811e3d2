"""`Session`: the executor protocol around a `Loop`, sans-IO, so every executor drives one.

What each executor would otherwise re-implement lives here once: starting or resuming (from a
loop, a dump or a journal), a tool's `ToolStarted` recorded and made durable before it runs, the
events each step records (journaled, shown to `on_event`, narrated as `Update`s), the wait a
retry's `not_before` asks for, the work the loop no longer waits for, the deadline's `Tick`, and
a model reply that is not a `ModelResponse`. A driver takes the commands, does the I/O, and
sends what happened back; it never sends to the loop itself.
"""

from __future__ import annotations

__all__ = ["Session", "Work", "check_prompt"]

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec
from turnstile.core import (
    AwaitApproval,
    CallModel,
    Command,
    Event,
    Finish,
    InvalidObservation,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    Resumed,
    RunTool,
    Started,
    Tick,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.messages import Message, UserMessage

from ._events import ModelCallStarted, Narrator, Update
from ._logs import logged
from ._run import Run

if TYPE_CHECKING:
    from ._journal import Journal

Work = CallModel | RunTool | AwaitApproval
"""A command that is work to carry out (a `Finish` is none)."""


def check_prompt(prompt: str | Sequence[Message] | None, resumed: Loop | None) -> None:
    """A prompt starts a run: on a new loop, an idle one, or a finished one (whose conversation
    it goes on with); a loop still waiting on commands is resumed without one."""
    if resumed is None:
        if prompt is None:
            raise ValueError("run() needs a prompt, or a loop or a journal to resume")
        return
    if prompt is None and resumed.state.phase == "idle":
        raise ValueError("the loop has not started: give it a prompt")
    shown = []
    for command in [] if prompt is None else resumed.outstanding_commands():
        match command:
            case RunTool(id=call_id, name=name) | AwaitApproval(id=call_id, name=name):
                shown.append(f"{call_id} ({name})")
            case CallModel(id=command_id):
                shown.append(command_id)
    if shown:
        raise ValueError(
            f"the loop still waits on {', '.join(shown)}: resume it without a prompt (a prompt "
            "starts a new run once the loop is finished)"
        )


def _journaled_prompt(prompt: str | Sequence[Message] | None, events: Sequence[Event]) -> None:
    """A journal that holds a run resumes it: the prompt, if given, must be the one it started
    from (the same call, made again after a crash), else the journal is not this run's."""
    if prompt is None:
        return
    given = [UserMessage(prompt)] if isinstance(prompt, str) else list(prompt)
    last = next(e for e in reversed(events) if type(e) is Started)
    if given != last.messages:
        raise ValueError(
            "the journal holds a run started from another prompt: to resume it, give the same "
            "prompt or none; to start another run, give another journal"
        )


def _with_tools(spec: LoopSpec, specs: Sequence[ToolSpec]) -> LoopSpec:
    """A spec without tools gets the runner's; a spec's tools must all have an implementation."""
    if not spec.tools and specs:
        return msgspec.structs.replace(spec, tools=tuple(specs))
    missing = sorted({t.name for t in spec.tools} - {s.name for s in specs})
    if missing:
        raise ValueError(f"tools without an implementation: {', '.join(missing)}")
    return spec


class Session:
    """One run of a loop as an executor sees it: `start()`, then `send()` each observation; both
    return the commands to carry out, every event they recorded already journaled and shown.

    The loop is fresh, resumed (`loop=`, its clock going on from its last event, so time at rest
    is not counted) or rebuilt from `journal`'s events. A spec without tools gets `tool_specs`
    (the runner's), and a run started so records them in its `Started` event. Raises
    `ValueError` for a prompt the loop cannot start from, none where it needs one, or tools
    the spec names that `tool_specs` lacks.
    """

    __slots__ = (
        "_journal",
        "_narrator",
        "_on_event",
        "_prompt",
        "_tools",
        "_written",
        "finish",
        "loop",
        "now",
        "on_delta",
        "recorded",
        "waiting",
    )

    def __init__(
        self,
        spec: LoopSpec,
        prompt: str | Sequence[Message] | None = None,
        *,
        loop: Loop | None = None,
        tool_specs: Sequence[ToolSpec] = (),
        clock: Callable[[], float],
        journal: Journal | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_update: Callable[[Update], object] | None = None,
    ) -> None:
        self._tools = () if spec.tools else tuple(tool_specs)
        spec = _with_tools(spec, tool_specs)
        if journal is not None and journal.events:
            _journaled_prompt(prompt, journal.events)
            prompt, loop = None, journal.loop(spec)
        check_prompt(prompt, loop)
        self.now = clock
        if loop is None:
            loop = Loop(spec)
        else:
            loop = Loop(spec, loop.state)
            offset = loop.resume_offset(clock())
            if offset:
                self.now = lambda: clock() + offset
        self.loop = loop
        self._prompt = prompt
        self._journal = journal
        self._on_event = on_event
        self._written = len(loop.state.events)
        self._narrator = None if on_update is None else Narrator(on_update, loop)
        self.on_delta = on_update
        """What a model call's deltas go to (the caller's `on_update`), if anything."""
        self.recorded: list[Event] = []
        """The events the last `start`, `send` or `begin` recorded."""
        self.finish: Finish | None = None
        """The loop's `Finish`, once `hand_out` has seen it."""
        self.waiting: list[AwaitApproval] = []
        """The approvals `hand_out` was told no one answers."""

    # -- the loop's side ---------------------------------------------------------------------

    def start(self, resume: bool = True) -> list[Command]:
        """What to carry out first: the run the prompt starts (on a new or idle loop, or going on
        with a finished loop's conversation); else the loop is told it was `Resumed` (a finished
        one has nothing left to do), or with `resume=False` (the same process going on) what it
        still waits on."""
        if self._prompt is not None:
            commands = self.loop.start(self._prompt, self.now(), self._tools)
        elif self.loop.state.phase == "done" or not resume:
            commands = self.loop.outstanding_commands()
        else:
            return self.send(Resumed(now=self.now()))
        self._record(commands)
        return commands

    def send(self, obs: Observation) -> list[Command]:
        """Record what the world did; return what the loop decides. A reply that is not a
        `ModelResponse` is the client's bug: final, as if it had raised."""
        try:
            commands = self.loop.send(obs)
        except InvalidObservation as e:  # the loop is left as it was
            if type(obs) is not ModelReplied or e.path == "now":  # else the response's fault
                raise
            message = f"the model client's reply is not a valid reply ({e})"
            commands = self.loop.send(ModelFailed(obs.command_id, message, False, now=obs.now))
        self._record(commands)
        return commands

    # -- before the I/O ----------------------------------------------------------------------

    def begin(self, command: Command, commit: bool = True) -> bool:
        """About to carry out `command`, one at a time: False if the loop no longer waits for
        it (it closed the call since: the deadline passed, say). A tool's start is recorded,
        and (with `commit`) the journal made durable before any call, so a crash never runs a
        call twice that is not replay-safe."""
        if type(command) is RunTool or type(command) is AwaitApproval:
            if command.id not in self.loop.outstanding_ids():
                return False
        if type(command) is RunTool:
            self.send(ToolStarted(command.id, now=self.now()))
        if commit and (type(command) is RunTool or type(command) is CallModel):
            self.commit()
        return True

    def hand_out(self, commands: Iterable[Command], approving: bool) -> list[Work]:
        """The work to start at once of `commands`: each tool's start recorded and everything
        made durable before any of it runs. A `Finish` is kept in `finish`; approvals go to
        `waiting` unless someone is `approving`."""
        work: list[Work] = []
        for command in commands:
            match command:
                case Finish():
                    self.finish = command
                case AwaitApproval() if not approving:
                    self.waiting.append(command)
                case RunTool(id=call_id):
                    self.send(ToolStarted(call_id, now=self.now()))
                    work.append(command)
                case CallModel() | AwaitApproval():
                    work.append(command)
        if work:
            self.commit()
        return work

    def wait(self, command: CallModel) -> float:
        """How long to wait before sending `command`: the time its `not_before` asks for."""
        if command.not_before is None:
            return 0.0
        return max(command.not_before - self.now(), 0.0)

    def calling(self, command: CallModel) -> None:
        """The model call `command` is about to be sent (after any wait it asked for)."""
        if self._narrator is not None:
            self._narrator.show(ModelCallStarted(command.id))

    def commit(self) -> None:
        """Make everything journaled durable: done before any effect (a call, a request)."""
        if self._journal is not None:
            self._journal.commit()

    # -- while the I/O goes on ---------------------------------------------------------------

    def stale(self, ids: Iterable[str]) -> list[str]:
        """Of the work in flight (by command id), what the loop no longer waits for (it
        finished, or a guard gave up on a running round): to cancel, its result unwanted."""
        wanted = self.loop.outstanding_ids()
        return [i for i in ids if i not in wanted]

    def deadline(self) -> float | None:
        """When to wake the loop with `tick()` (on `now`'s clock); None: no need."""
        return self.loop.next_deadline()

    def tick(self) -> list[Command] | None:
        """The deadline's alarm went off: a `Tick`, sent only if the loop says its deadline has
        passed (clocks that disagree by a rounding never make it tick in a loop); None if not."""
        now = self.now()
        if not self.loop.deadline_passed(now):
            return None
        return self.send(Tick(now=now))

    def run(self) -> Run:
        """The outcome so far: the loop, its `Finish` if any, the approvals left waiting."""
        return Run(self.loop, self.finish, self.waiting)

    def _record(self, commands: list[Command]) -> None:
        events = self.loop.state.events
        new = self.recorded = events[self._written :]
        self._written = len(events)
        if self._journal is not None:
            for event in new:
                self._journal.append(event)
        logged(self.loop, new)
        if self._on_event is not None:
            for event in new:
                self._on_event(event)
        if self._narrator is not None:
            self._narrator.recorded(self.loop, new)
            self._narrator.commands(self.loop, commands)
