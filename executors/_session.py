"""`Session`: the executor protocol around a `Loop`, sans-IO, so every executor drives one.

What each executor would otherwise re-implement lives here once: starting or resuming (from a
loop, a dump or a journal), a tool's `ToolStarted` recorded and made durable before it runs, the
events each step records (journaled, shown to `on_event` and `on_step`, narrated as `Update`s),
the wait a retry's `not_before` asks for, the work the loop no longer waits for, when to set the
deadline's alarm and whether its `Tick` goes out, and a model reply that is not a
`ModelResponse`. A driver takes the commands, does the I/O (sleeping, calling, timers, in its
own way), and sends what happened back; it never sends to the loop itself. `sync`, `aio` and
the Temporal workflow each drive one.
"""

from __future__ import annotations

__all__ = ["Session", "Work", "check_prompt"]

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from turnstile.core import (
    AwaitApproval,
    CallModel,
    CheckGuardrail,
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
    ToolReturned,
    ToolSpec,
    ToolStarted,
)
from turnstile.core.messages import Message, UserMessage

from ._events import Answering, ModelCallStarted, Narrator, Update
from ._logs import logged
from ._run import Run
from ._served import Recorded, forked

if TYPE_CHECKING:
    from ._journal import Journal

Work = CallModel | RunTool | AwaitApproval | CheckGuardrail
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

    Start from `prompt`, or resume `loop` (from `Loop.load` / `Loop.replay`): the loop is told
    it was `Resumed` and decides what to carry out again. A `prompt` with a `loop` starts it if
    it is idle, and goes on with its conversation (a new run, the prompt the next user message)
    if it is finished; a loop still waiting on commands is resumed without one. A spec without
    tools gets `tool_specs` (the runner's), and a run started so records them in its `Started`
    event. Raises `ValueError` for a prompt the loop cannot start from, none where it needs
    one, or tools the spec names that `tool_specs` lacks.

    A `Fork` (`fork`'s loop), or a fork's journal, is served from its parent's log: the work
    its parent already did, the session answers itself while the fork stays on the parent's
    track, and hands out only the rest.

    `journal` gets every event the loop records, and a call's start is made durable before the
    call runs (with its `fsync="round"`, the round's together: see `Journal`). A journal that
    already holds a run resumes it: give the same prompt or none (another raises `ValueError`).

    `clock` stamps observations. A resumed loop's time goes on from its last event (time at
    rest is not counted), unless `offset` says what to add to `clock` (a Temporal run continued
    as new carries its own); either way the time read never falls before the last event's.
    `on_event` sees each event once the loop has recorded it (and the journal has it): a dump
    taken there is the state as it is. `on_update` sees what a UI shows, as it happens
    (`Update`: a streamed reply's deltas, tools started and finished, approvals needed,
    retries, the finish). `on_step` sees every command, and every observation of what the
    world did, each once the loop has recorded it (a `RunTool` once its start is): a dump
    taken there, as in `on_event`, never runs a call twice that is not replay-safe. `log=False`
    keeps the run out of the `turnstile.run` log (a Temporal workflow, whose replays would log
    each step again).
    """

    __slots__ = (
        "_ahead",
        "_armed_for",
        "_fork",
        "_journal",
        "_log",
        "_narrator",
        "_on_event",
        "_on_step",
        "_parked",
        "_prompt",
        "_safe",
        "_spending",
        "_tools",
        "_written",
        "children",
        "finish",
        "loop",
        "now",
        "offset",
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
        offset: float | None = None,
        journal: Journal | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_update: Callable[[Update], object] | None = None,
        on_step: Callable[[Command | Observation], None] | None = None,
        log: bool = True,
    ) -> None:
        self._tools = () if spec.tools else tuple(tool_specs)
        spec = _with_tools(spec, tool_specs)
        self._fork: Recorded | None  # a fork's parent log, serving what it recorded
        self._fork, spec = forked(spec, loop, journal)
        if journal is not None and journal.events:
            _journaled_prompt(prompt, journal.events)
            prompt, loop = None, journal.loop(spec)
        check_prompt(prompt, loop)
        if loop is None:
            loop = Loop(spec)
        else:
            loop = Loop(spec, loop.state)
            if offset is None:
                offset = loop.resume_offset(clock())
        self.loop = loop
        self.offset = offset or 0.0
        """What `now` adds to `clock` (a run continued elsewhere carries it on)."""
        self.now = clock if offset is None else self._clock(clock, offset)
        self._prompt = prompt
        self._journal = journal
        self._safe: frozenset[str] | None = None  # under "round": the replay-safe tools
        if journal is not None and journal.fsync == "round":
            self._safe = frozenset(t.name for t in loop.spec.tools if t.replay_safe)
        self._ahead: set[str] = set()  # calls whose start went with an earlier one's
        self._on_event = on_event
        self._on_step = on_step
        self._log = log
        self._written = len(loop.state.events)
        if on_update is not None and loop.spec.output is not None:
            on_update = Answering(on_update, native=loop.spec.output_mode == "native")
        self._narrator = None if on_update is None else Narrator(on_update, loop)
        self._armed_for: float | None = None
        self.on_delta = on_update
        """What a model call's deltas go to (the caller's `on_update`), if anything."""
        self.recorded: list[Event] = []
        """The events the last `start`, `send` or `begin` recorded."""
        self.finish: Finish | None = None
        """The loop's `Finish`, once `next` or `hand_out` has seen it."""
        self.waiting: list[AwaitApproval] = []
        """The approvals `next` or `hand_out` was told no one answers."""
        self.children: dict[str, Run] = {}
        """The runs of sub-agents' calls (`as_tool`) made here, by call id."""
        self._spending: dict[str, Run] = {}  # ...those whose results are still to come
        self._parked: dict[str, InvalidObservation | None] = {}  # calls left open: `child_waits`

    def _clock(self, clock: Callable[[], float], offset: float) -> Callable[[], float]:
        """`clock` plus `offset`, never before the loop's last event (a clock's float steps,
        epoch seconds' 2.4e-7 s, can take the offset added back that far below it)."""
        loop = self.loop

        def now() -> float:
            at, events = clock() + offset, loop.state.events
            return max(at, events[-1].now) if events else at

        return now

    # -- the loop's side ---------------------------------------------------------------------

    def start(self, resume: bool = True) -> list[Command]:
        """What to carry out first: the run the prompt starts (on a new or idle loop, or going on
        with a finished loop's conversation); else the loop is told it was `Resumed` (a finished
        one has nothing left to do), or with `resume=False` (the same run going on, as a Temporal
        run continued as new) what it still waits on."""
        if self._fork is not None:  # a fork's first start: its prompt, its calls under way
            resume, prompt = self._fork.starting(self, resume)
            self._prompt = prompt if prompt is not None else self._prompt
        if self._prompt is not None:
            commands = self.loop.start(self._prompt, self.now(), self._tools)
        elif self.loop.state.phase == "done" or not resume:
            commands = self.loop.outstanding_commands()
        else:
            return self._served(self._apply(Resumed(now=self.now())))
        self._record(commands)
        return self._served(commands)

    def send(self, obs: Observation) -> list[Command]:
        """Record what the world did (`on_step` sees it); return what the loop decides. A reply
        that is not a `ModelResponse` is the client's bug: final, as if it had raised. A
        sub-agent's result carries what its child run spent (`child_waits`: none is recorded)."""
        if self._parked and type(obs) is ToolReturned and obs.call_id in self._parked:
            if (refused := self._parked.pop(obs.call_id)) is not None:
                raise refused
            return []
        if self._spending and type(obs) is ToolReturned:
            child = self._spending.pop(obs.call_id, None)
            if child is not None:
                state = child.loop.state
                obs = msgspec.structs.replace(obs, usage=state.usage, cost=state.cost)
        commands = self._apply(obs)
        if self._on_step is not None:  # once recorded: a dump taken there holds it
            self._on_step(obs)
        return commands if self._fork is None else self._fork.serve(self, commands)

    def _served(self, commands: list[Command]) -> list[Command]:
        """A fork answers what its parent's log can; the rest is carried out."""
        return commands if self._fork is None else self._fork.serve(self, commands)

    def _apply(self, obs: Observation) -> list[Command]:
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

    def begin(self, command: Command, commit: bool = True, ahead: Sequence[Command] = ()) -> bool:
        """About to carry out `command`, one at a time: False if the loop no longer waits for
        it (it closed the call since: the deadline passed, say). A tool's start is recorded,
        and (with `commit`) the journal made durable before any call, so a crash never runs a
        call twice that is not replay-safe; then `on_step` sees the command. Under the
        journal's "round" policy no commit comes before a model call, and a tool's start
        takes with it those of the replay-safe calls of `ahead` (the round's rest, begun
        later without a commit of their own)."""
        kind = type(command)
        if kind is RunTool or kind is AwaitApproval or kind is CheckGuardrail:
            if command.id not in self.loop.outstanding_ids():  # type: ignore[attr-defined]
                self._ahead.discard(command.id)  # type: ignore[attr-defined]
                return False
        elif kind is CallModel and command.id != self.loop.state.pending_model:  # type: ignore[attr-defined]
            return False  # a guardrail tripped beside it
        if type(command) is RunTool:
            if command.id in self._ahead:  # recorded with the round's first, and made durable
                self._ahead.remove(command.id)
                commit = False
            else:
                self._apply(ToolStarted(command.id, now=self.now()))
                if self._safe is not None and ahead:
                    self._start_ahead(ahead)
        elif type(command) is CallModel:
            commit = commit and self._safe is None  # asking again is harmless
        else:
            commit = False
        if commit:
            self.commit()
        if self._on_step is not None:
            self._on_step(command)
        return True

    def _start_ahead(self, queue: Sequence[Command]) -> None:
        """Record the starts of `queue`'s replay-safe tool calls now: a crash before one runs
        only has it run on resume."""
        safe, ahead, wanted = self._safe, self._ahead, self.loop.outstanding_ids()
        assert safe is not None
        for later in queue:
            if type(later) is RunTool and later.name in safe and later.id not in ahead:
                if later.id in wanted:
                    self._apply(ToolStarted(later.id, now=self.now()))
                    ahead.add(later.id)

    def next(self, queue: list[Command], approving: bool) -> Work | None:
        """For a driver that carries out one command at a time: the next of `queue` (what
        `start` and `send` returned, in order) to carry out, taken off it and begun (`begin`).
        A `Finish` is kept in `finish`, and ends it; approvals go to `waiting` unless someone
        is `approving`; None once nothing is left to carry out."""
        while queue:
            command = queue.pop(0)
            if not self.begin(command, ahead=queue):
                continue  # the loop closed its call since (the deadline passed, say)
            match command:
                case Finish():
                    self.finish = command
                    return None
                case AwaitApproval() if not approving:
                    self.waiting.append(command)
                case CallModel() | RunTool() | AwaitApproval() | CheckGuardrail():
                    return command
        return None

    def hand_out(self, commands: Sequence[Command], approving: bool) -> list[Work]:
        """The work to start at once of `commands`: each tool's start recorded and everything
        made durable before any of it runs (under the journal's "round" policy, only before
        tool calls), then `on_step` sees each command. A `Finish` is kept in `finish`;
        approvals go to `waiting` unless someone is `approving`."""
        work: list[Work] = []
        tools = False
        for command in commands:
            match command:
                case Finish():
                    self.finish = command
                case AwaitApproval() if not approving:
                    self.waiting.append(command)
                case RunTool(id=call_id):
                    self._apply(ToolStarted(call_id, now=self.now()))
                    work.append(command)
                    tools = True
                case CallModel() | AwaitApproval() | CheckGuardrail():
                    work.append(command)
        if tools or (work and self._safe is None):
            self.commit()
        if self._on_step is not None:  # once every call handed out is recorded as started
            for command in commands:
                self._on_step(command)
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

    def alarm(self, least: float) -> float | None:
        """How long from now to set the deadline's alarm for (at least `least`, so a clock's
        rounding never makes it ring in a busy loop); None: no deadline to wake the loop for.
        The deadline moves as the run goes (time spent waiting only for a person does not
        count): after each step, `alarm_moved` says whether to set it again."""
        deadline = self._armed_for = self.loop.next_deadline()
        return None if deadline is None else max(deadline - self.now(), least)

    def alarm_moved(self) -> bool:
        """Whether the deadline is not the one the alarm was last set for."""
        return self.loop.next_deadline() != self._armed_for

    def tick(self) -> Tick | None:
        """The alarm rang: the `Tick` to send, only if the loop says its deadline has passed
        (clocks that disagree by a rounding never make it tick in a loop); None if not."""
        now = self.now()
        return Tick(now=now) if self.loop.deadline_passed(now) else None

    def run(self) -> Run:
        """The outcome so far: the loop, its `Finish` if any, else the approvals left waiting,
        and the sub-agents' runs."""
        run = Run(self.loop, self.finish, [] if self.finish is not None else self.waiting)
        run.children = self.children
        return run

    # -- sub-agents --------------------------------------------------------------------------

    def child_finished(self, call_id: str, run: Run) -> None:
        """Sub-agent call `call_id` ran its child `run`: the transcript nests it, and the
        call's result carries what it spent (once: a later call may reuse the id)."""
        self.children[call_id] = self._spending[call_id] = run

    def child_waits(self, call_id: str, held: Sequence[AwaitApproval] | InvalidObservation) -> None:
        """Sub-agent call `call_id`'s journaled child waits for approvals no one answers now
        (`held`, then in `Run.waiting`), or refused an edit (raised here at the call's result):
        the call is left open, so this run stops; resumed, it runs the call again (replay-safe),
        whose child goes on from its journal."""
        if not isinstance(held, InvalidObservation):
            self.waiting.extend(held)
        self._parked[call_id] = held if isinstance(held, InvalidObservation) else None

    def child_journal(self, call_id: str) -> Path | None:
        """Where the child run of sub-agent call `call_id`, of the round in flight, keeps its
        journal (`child_path`): beside this run's; None without one."""
        if self._journal is None:
            return None
        from ._journal import child_path

        events = self.loop.state.events
        at = next(i for i in range(len(events) - 1, -1, -1) if type(events[i]) is ModelReplied)
        return child_path(self._journal.path, at, call_id)

    @contextlib.contextmanager
    def child_opened(self, path: Path | None) -> Iterator[Journal | None]:
        """The journal at `path` (None: none), with this run's fsync policy, closed after."""
        if path is None:
            yield None
            return
        from ._journal import Journal

        with Journal(path, fsync=self._journal.fsync) as journal:  # type: ignore[union-attr,arg-type]
            yield journal

    def _record(self, commands: list[Command]) -> None:
        events = self.loop.state.events
        new = self.recorded = events[self._written :]
        self._written = len(events)
        if self._journal is not None:
            for event in new:
                self._journal.append(event)
        if self._log:
            logged(self.loop, new)
        if self._on_event is not None:
            for event in new:
                self._on_event(event)
        if self._narrator is not None:
            self._narrator.recorded(self.loop, new)
            self._narrator.commands(self.loop, commands)
