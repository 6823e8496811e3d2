"""A small driver for tests: scripts observations and keeps the run's steps for its snapshot,
written as every snapshot writes a run (`tests.steps`)."""

from __future__ import annotations

from typing import Any

from turnstile.core import (
    CallModel,
    Command,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
    Started,
    ToolReturned,
    ToolSpec,
)
from turnstile.core.messages import (
    ModelResponse,
    ModelStop,
    Part,
    Text,
    ToolCall,
    Usage,
    validate_history,
)

from tests.steps import run_log, step_line

SMALL = Usage(10, 5)


def reply(*parts: Part | str, stop: ModelStop | None = None, usage: Usage = SMALL) -> ModelResponse:
    content = [Text(p) if isinstance(p, str) else p for p in parts]
    if stop is None:
        stop = (
            ModelStop.tool_use if any(type(p) is ToolCall for p in content) else ModelStop.end_turn
        )
    return ModelResponse(content, stop, usage)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


def spec(*tools: ToolSpec | str, **kwargs: Any) -> LoopSpec:
    return LoopSpec(tools=tuple(ToolSpec(t) if isinstance(t, str) else t for t in tools), **kwargs)


class Driver:
    """Wraps a Loop: checks the pairing invariant on every request and logs every step."""

    def __init__(self, loop_spec: LoopSpec, loop: Loop | None = None) -> None:
        self.loop = loop if loop is not None else Loop(loop_spec)
        self.log: list[str] = []
        self.now = 0.0
        self.last: list[Command] = []

    @property
    def state(self):
        return self.loop.state

    def _record(self, commands: list[Command]) -> list[Command]:
        for c in commands:
            if type(c) is CallModel:
                validate_history(c.request.messages)
            self.log.append(step_line(c))
        self.last = commands
        return commands

    def start(self, prompt: str = "hi") -> list[Command]:
        commands = self.loop.start(prompt, self.now)
        started = [e for e in self.state.events if type(e) is Started][-1]
        self.log.append(step_line(started))
        return self._record(commands)

    def send(self, obs: Observation) -> list[Command]:
        self.log.append(step_line(obs))
        return self._record(self.loop.send(obs))

    def pending_model(self) -> str:
        assert self.state.pending_model is not None, "no model call outstanding"
        return self.state.pending_model

    def reply(
        self,
        *parts: Part | str,
        stop: ModelStop | None = None,
        usage: Usage = SMALL,
        dt: float = 1.0,
    ) -> list[Command]:
        self.now += dt
        return self.send(
            ModelReplied(self.pending_model(), reply(*parts, stop=stop, usage=usage), now=self.now)
        )

    def result(
        self, call_id: str, content: str = "ok", is_error: bool = False, dt: float = 1.0
    ) -> list[Command]:
        self.now += dt
        return self.send(ToolReturned(call_id, content, is_error, now=self.now))

    def transcript(self) -> str:
        """The run as its snapshot shows it: its steps, then its transcript."""
        return run_log(self.log, self.state)


def deep(kind: type, levels: int = 3000) -> Any:
    """A value nested `levels` deep in lists (`kind` list) or in dicts (`kind` dict)."""
    value: Any = 1
    for _ in range(levels):
        value = [value] if kind is list else {"a": value}
    return value


SPEC = spec("t")
"""A spec of one tool, `t`."""


def one_call_running() -> Driver:
    """A run whose reply called `t` once (call `c1`), the call under way."""
    d = Driver(SPEC)
    d.start()
    d.reply(call("c1", "t", n=1))
    return d
