"""`Agent`: a spec, its model and its tools as one value, which every executor and the command
line take in place of the spec."""

from __future__ import annotations

__all__ = ["Agent", "agent_guardrails", "built", "unpacked"]

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

from turnstile.core import LoopSpec, Tool
from turnstile.core.guardrails import GuardrailFunction
from turnstile.providers import model_client

from ._effects import check_model
from ._protocols import AsyncModelClient, ModelClient, ToolRunner

Model = str | ModelClient | AsyncModelClient
Tools = ToolRunner | Iterable[Tool | Callable[..., Any]]


@dataclasses.dataclass(frozen=True)
class Agent:
    """What to run: `spec` (the prompt, guards, output...), `model` (a client, or a model
    string such as `"openai:gpt-4.1"`, built from the environment when a run starts; see
    `turnstile.providers.model_client`) and `tools` (tools, or a runner such as a `Sandbox`).

        agent = Agent(LoopSpec(system="..."), model="anthropic:claude-sonnet-4-5",
                      tools=[get_weather])
        run = sync.run(agent, "Weather in Paris?")

    `guardrails`: the functions of the spec's guardrails (`@guardrail`), run by the executor.
    `sync.run`, `aio.run`, Temporal's `start` and `run`, and `turnstile run module:agent` take
    it where they take a spec. Raises `TypeError` for a spec that is not a `LoopSpec`.
    """

    spec: LoopSpec = dataclasses.field(default_factory=LoopSpec)
    _: dataclasses.KW_ONLY
    model: Model
    tools: Tools = ()
    guardrails: tuple[GuardrailFunction, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.spec, LoopSpec):
            raise TypeError(f"Agent(spec) takes a LoopSpec, not {type(self.spec).__name__}")
        if not isinstance(self.tools, ToolRunner) and not hasattr(self.tools, "run"):
            object.__setattr__(self, "tools", tuple(self.tools))  # a value: a list is copied
        object.__setattr__(self, "guardrails", tuple(self.guardrails))


def agent_guardrails(spec: LoopSpec | Agent, given: Any) -> Any:
    """The guardrail functions of a run given `spec` (or an agent, which brings its own: then
    the run's `guardrails=` is a `TypeError`) and the run's `guardrails=`."""
    if not isinstance(spec, Agent):
        return given
    if given:
        raise TypeError("the agent has its guardrails already: give them to Agent(...) only")
    return spec.guardrails


@overload
def unpacked(
    spec: LoopSpec | Agent, model: Model | None, tools: Tools, *, is_async: Literal[False]
) -> tuple[LoopSpec, ModelClient, Tools]: ...
@overload
def unpacked(
    spec: LoopSpec | Agent, model: Model | None, tools: Tools, *, is_async: Literal[True]
) -> tuple[LoopSpec, AsyncModelClient | ModelClient, Tools]: ...
@overload
def unpacked(
    spec: LoopSpec | Agent, model: Model | None, tools: Tools, *, is_async: None
) -> tuple[LoopSpec, Model, Tools]: ...
def unpacked(
    spec: LoopSpec | Agent, model: Model | None, tools: Tools, *, is_async: bool | None
) -> tuple[LoopSpec, Any, Tools]:
    """The spec, model and tools of a run given `spec` (or an agent) and the run's `model=` and
    `tools=`. A model string becomes its client, sync or async as `is_async` says (None leaves
    it a name, as Temporal runs name their model). Raises `TypeError` for an agent given a
    `model=` or `tools=` of the run's own, for no model at all, and for a client the executor
    cannot call (`check_model`)."""
    if isinstance(spec, Agent):
        again = [
            name for name, given in (("model", model is not None), ("tools", tools != ())) if given
        ]
        if again:
            raise TypeError(
                f"the agent has its {' and '.join(again)} already: give "
                f"{' and '.join(f'{n}=' for n in again)} to Agent(...) or to the run, not both"
            )
        agent = spec
        spec, model, tools = agent.spec, agent.model, agent.tools
    elif model is None:
        raise TypeError(
            "the run needs a model: model= a client or a model string ('openai:gpt-4.1'), "
            "or an Agent in place of the spec"
        )
    client = built(model, is_async)
    if is_async is not None:
        check_model(client, can_await=is_async)
    return spec, client, tools


def built(model: Model, is_async: bool | None) -> Model:
    """The client a model string names (as `is_async` says; None: the string as it is)."""
    return (
        model_client(model, is_async=is_async)
        if isinstance(model, str) and is_async is not None
        else model
    )
