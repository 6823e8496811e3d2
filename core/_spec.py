"""What a loop is configured with: its tools, its guards and its stop conditions.

All plain data, so a spec can be logged or shipped beside a dumped state; only user-supplied
predicates in `stop_when` are code.
"""

from __future__ import annotations

__all__ = ["HasToolCall", "LoopSpec", "TextContains", "TurnCountIs"]

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ._compaction import Compaction
from ._cost import Price
from ._errors import InvalidSpec
from ._fields import check_fields
from ._guardrails import Guardrail, GuardrailFunction
from ._guards import Guards
from ._messages import AssistantMessage, ToolCall, text_of
from ._output import OUTPUT_TOOL, check_output
from ._request import CachePolicy, ServerTool
from ._state import LoopState
from ._tools import Tool, ToolSpec


class TurnCountIs(msgspec.Struct, frozen=True, tag="step_count_is"):
    """Stop once `n` turns (model round-trips) have completed."""

    n: int

    def __call__(self, state: LoopState) -> bool:
        return state.turns >= self.n


def _last_reply(state: LoopState) -> AssistantMessage | None:
    for message in reversed(state.messages):
        if type(message) is AssistantMessage:
            return message
    return None


class HasToolCall(msgspec.Struct, frozen=True, tag="has_tool_call"):
    """Stop once the last reply called the tool `name` (after its results are written)."""

    name: str

    def __call__(self, state: LoopState) -> bool:
        reply = _last_reply(state)
        return reply is not None and any(
            type(p) is ToolCall and p.name == self.name for p in reply.content
        )


class TextContains(msgspec.Struct, frozen=True, tag="text_contains"):
    """Stop once the last reply's text contains `text`."""

    text: str

    def __call__(self, state: LoopState) -> bool:
        reply = _last_reply(state)
        return reply is not None and self.text in text_of(reply.content)


BuiltInCondition = TurnCountIs | HasToolCall | TextContains
StopCondition = BuiltInCondition | Callable[[LoopState], bool]


class LoopSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a loop needs besides its state: prompt, tools, guards, stop conditions.

    `stop_when` takes the built-in conditions or any pure predicate of the state; they are checked
    after each turn's results are written. Decoded from JSON, the built-in ones come back as
    themselves (a predicate that is code cannot be shipped).

    `server_tools` run at the provider, each for its format. `cache`: prompt caching, on by
    default. `output`: the type of the final answer (a msgspec Struct, a dataclass, any type
    msgspec converts to; like a predicate, code): the model gives it by calling the
    `final_answer` tool (`output_mode="tool"`) or, where the format has one, through its native
    structured output (`"native"`); an answer that does not convert goes back to the model,
    `Guards.max_output_retries` times, and `Finish.output` is the typed value.

    `models`: the models to ask, in order (empty: the client's own): the first for every call,
    the next once one fails in a retryable way past `Guards.max_model_retries`. `prices`: per
    model, what its calls cost (`LoopState.cost`; `Guards.max_cost` needs every model priced).
    `compaction`: what to send once the conversation nears `Guards.context_window` instead of
    stopping (`Compaction`); off by default, since it changes what the model sees.

    `tools` takes `ToolSpec`s or the `Tool`s `@tool` makes (kept as their specs). Every field is
    checked when the spec is built: one no run can use raises `InvalidSpec` naming it.

    `guardrails`: checks the executor runs (`Guardrail`, or the functions `@guardrail` makes,
    kept as their `Guardrail`s, whose functions go to the run as tools do): on the run's input
    beside its first model call, on each tool call before any call of its round runs, on the
    final answer before the run finishes with it. A check that trips finishes the run
    (`StopReason.guardrail`).
    """

    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    guards: Guards = Guards()
    stop_when: tuple[Any, ...] = ()
    max_tokens: int = 4096
    server_tools: tuple[ServerTool, ...] = ()
    cache: CachePolicy = CachePolicy()
    output: Any = None
    output_mode: Literal["tool", "native"] = "tool"
    models: tuple[str, ...] = ()
    prices: dict[str, Price] = {}
    compaction: Compaction | None = None
    guardrails: tuple[Guardrail, ...] = ()

    def __post_init__(self) -> None:
        rails = self.guardrails
        if isinstance(rails, tuple | list) and any(type(g) is GuardrailFunction for g in rails):
            kept = tuple(g.spec if type(g) is GuardrailFunction else g for g in rails)
            msgspec.structs.force_setattr(self, "guardrails", kept)
        tools = self.tools
        if isinstance(tools, tuple | list):
            for i, t in enumerate(tools):
                if not isinstance(t, ToolSpec | Tool) and callable(t):
                    raise InvalidSpec(
                        f"{getattr(t, '__name__', t)!r} is a function: decorate it with @tool",
                        field=f"LoopSpec.tools[{i}]",
                    )
            if any(type(t) is Tool for t in tools):
                specs = tuple(t.spec if type(t) is Tool else t for t in tools)
                msgspec.structs.force_setattr(self, "tools", specs)
        check_fields(self)
        if self.max_tokens < 1:
            raise InvalidSpec("must be 1 or more", field="LoopSpec.max_tokens")
        names = [t.name for t in self.tools]
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise InvalidSpec(
                f"two tools named {', '.join(twice)}: give each tool its own name",
                field="LoopSpec.tools",
            )
        named = [g.name for g in self.guardrails]
        if len(set(named)) < len(named):
            raise InvalidSpec(
                "two guardrails share a name: give each its own", field="LoopSpec.guardrails"
            )
        if self.output is not None:
            check_output(self.output)
            if self.output_mode == "tool" and OUTPUT_TOOL in names:
                raise InvalidSpec(
                    f"{OUTPUT_TOOL!r} is the name of the tool that gives the answer "
                    "(LoopSpec.output): give yours another",
                    field="LoopSpec.tools",
                )
        if self.compaction is not None and self.guards.context_window is None:
            raise InvalidSpec("needs Guards.context_window", field="LoopSpec.compaction")
        unpriced = [m for m in self.models if m not in self.prices]
        if self.guards.max_cost is not None and (unpriced or not self.models):
            raise InvalidSpec(
                "Guards.max_cost needs LoopSpec.models, each with its price in LoopSpec.prices"
                + (f" (no price for {', '.join(unpriced)})" if unpriced else ""),
                field="LoopSpec.prices",
            )
        conditions = self.stop_when
        if any(type(c) is dict for c in conditions):  # decoded: the field's type is `Any`
            try:
                conditions = tuple(
                    msgspec.convert(c, BuiltInCondition) if type(c) is dict else c
                    for c in conditions
                )
            except msgspec.ValidationError as e:
                raise InvalidSpec(
                    f"not a built-in condition: {e}", field="LoopSpec.stop_when"
                ) from None
            msgspec.structs.force_setattr(self, "stop_when", conditions)
        for i, condition in enumerate(conditions):
            if not callable(condition):
                raise InvalidSpec(
                    f"not a stop condition but a {type(condition).__name__}: give TurnCountIs(n), "
                    "HasToolCall(name), TextContains(text) or a function of the state",
                    field=f"LoopSpec.stop_when[{i}]",
                )
