"""`Agent`: a spec, its model and its tools as one value, which every executor and the command
line take in place of the spec."""

from __future__ import annotations

__all__ = ["Agent", "built", "unpacked"]

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

from turnstile.core import LoopSpec, Tool
from turnstile.providers import ModelRouter, model_client

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

    `sync.run`, `aio.run`, Temporal's `start` and `run`, and `turnstile run module:agent` take
    it where they take a spec. Raises `TypeError` for a spec that is not a `LoopSpec`.
    """

    spec: LoopSpec = dataclasses.field(default_factory=LoopSpec)
    _: dataclasses.KW_ONLY
    model: Model
    tools: Tools = ()

    def __post_init__(self) -> None:
        if not isinstance(self.spec, LoopSpec):
            raise TypeError(f"Agent(spec) takes a LoopSpec, not {type(self.spec).__name__}")
        if not isinstance(self.tools, ToolRunner) and not hasattr(self.tools, "run"):
            object.__setattr__(self, "tools", tuple(self.tools))  # a value: a list is copied


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
    it a name, as Temporal runs name their model). Unless `model` is a client (which is then
    asked for every model, as ever), model strings among the spec's `models` (its fallbacks,
    `"anthropic:claude-sonnet-4-5"`) are asked through clients of their own
    (`ModelRouter.for_models`), so a run may fall back to another provider; when all of them
    are, `model` may be left out. Raises `TypeError` for an agent given a `model=` or `tools=`
    of the run's own, for no model at all, and for a client the executor cannot call
    (`check_model`)."""
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
    elif model is None and not _routed(spec.models):
        raise TypeError(
            "the run needs a model: model= a client or a model string ('openai:gpt-4.1'), "
            "or an Agent in place of the spec"
        )
    if model is None:  # each of the spec's models has its client: Temporal names the first
        client: Any = spec.models[0] if is_async is None else None
    else:
        client = built(model, is_async)
    if is_async is not None:
        if model is None or isinstance(model, str):  # a client given is asked for every model
            client = ModelRouter.for_models(spec.models, client, is_async=is_async)
        check_model(client, can_await=is_async)
    return spec, client, tools


def _routed(models: tuple[str, ...]) -> bool:
    """Every model of a run is a model string, with a client of its own."""
    return bool(models) and len(ModelRouter.model_strings(models)) == len(models)


def built(model: Model, is_async: bool | None) -> Model:
    """The client a model string names (as `is_async` says; None: the string as it is)."""
    return (
        model_client(model, is_async=is_async)
        if isinstance(model, str) and is_async is not None
        else model
    )
