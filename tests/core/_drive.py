"""A small driver for tests: scripts observations, keeps a readable log for snapshots, its arrows
as the executors draw them: `→` a command out of the loop, `←` an observation into it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from turnstile.core import (
    CallModel,
    Command,
    Loop,
    LoopSpec,
    ModelReplied,
    Observation,
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

SMALL = Usage(10, 5)


def _json(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), ensure_ascii=False, sort_keys=True)


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
        self._seen = 0

    @property
    def state(self):
        return self.loop.state

    def _record(self, commands: list[Command]) -> list[Command]:
        for c in commands:
            if type(c) is CallModel:
                validate_history(c.request.messages)
                messages = list(c.request.messages)
                new, self._seen = messages[self._seen :], len(messages)
                tools = [t.name for t in c.request.tools]
                self.log.append(
                    f"→ call_model {c.id} {c.request.purpose.value} tools={tools} new={_json(new)}"
                )
            else:
                fields = msgspec.to_builtins(c)
                kind = fields.pop("type")
                self.log.append(
                    f"→ {kind} {json.dumps(fields, ensure_ascii=False, sort_keys=True)}"
                )
        self.last = commands
        return commands

    def start(self, prompt: str = "hi") -> list[Command]:
        self.log.append(f"← start {prompt!r} @{self.now}")
        return self._record(self.loop.start(prompt, self.now))

    def send(self, obs: Observation) -> list[Command]:
        fields = msgspec.to_builtins(obs)
        kind = fields.pop("type")
        self.log.append(f"← {kind} {json.dumps(fields, ensure_ascii=False, sort_keys=True)}")
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
        st = self.state
        tail = (
            f"== phase={st.phase} stop={st.stop_reason.value} turns={st.turns} "
            f"usage={st.usage.input_tokens}/{st.usage.output_tokens} output={_json(st.output)}"
        )
        return "\n".join([*self.log, tail])
