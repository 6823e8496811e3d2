"""`Agent`: a spec, its model and its tools as one value, which every executor and the command
line take in place of the spec; `as_tool`: a spec or an agent offered to another run as a tool
(a sub-agent), whose calls run a child run under the parent's executor."""

from __future__ import annotations

__all__ = [
    "Agent",
    "ChildApproval",
    "Parent",
    "SubAgent",
    "agent_guardrails",
    "answered",
    "as_tool",
    "built",
    "came_through",
    "parenting",
    "unpacked",
]

import contextlib
import contextvars
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import msgspec
from turnstile.core import (
    AwaitApproval,
    InvalidObservation,
    LoopSpec,
    StopReason,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolSpec,
)
from turnstile.core.guardrails import GuardrailFunction
from turnstile.providers import ModelRouter, model_client

from ._effects import check_model, is_async
from ._protocols import AsyncModelClient, ModelClient, ToolRunner

if TYPE_CHECKING:
    from ._run import Run
    from ._session import Session

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


class Parent(NamedTuple):
    """The run a sub-agent's call belongs to: its session (the journal, the totals), its model
    client, its executor's `run` (`sync.run`, or `aio.run`, awaited), which runs the child, and
    its approver (None: the run hands approvals back in `Run.waiting`)."""

    session: Session
    model: Any
    run: Callable[..., Any]
    is_async: bool
    approve: Callable[[AwaitApproval], Any] | None = None


class ChildApproval(AwaitApproval, frozen=True, tag="child_approval"):
    """An approval a sub-agent's child run asks for, handed to the parent's approver (or left
    in the parent's `Run.waiting`): `via` the sub-agent calls it came through, as (tool name,
    call id), the parent's own first; `tool` the child's tool it asks to run (its schema checks
    an edit). It is an `AwaitApproval`: an approver written for a run's own calls answers it."""

    via: tuple[tuple[str, str], ...] = ()
    tool: ToolSpec | None = None

    @property
    def agent(self) -> str:
        """The sub-agent (its tool's name) whose child run asks."""
        return self.via[-1][0]

    @property
    def parent_call(self) -> str:
        """The call of that sub-agent, in the run above it."""
        return self.via[-1][1]


def came_through(
    command: AwaitApproval, via: tuple[str, str], tools: Iterable[ToolSpec]
) -> ChildApproval:
    """A child run's request as its parent shows it, the parent's sub-agent call `via` in
    front (a grandchild's goes on up); `tools`, the child's, hold the one whose schema checks
    an edit."""
    if type(command) is ChildApproval:
        return msgspec.structs.replace(command, via=(via, *command.via))
    tool = next((t for t in tools if t.name == command.name), None)
    return ChildApproval(command.id, command.name, command.arguments, via=(via,), tool=tool)


_PARENT: contextvars.ContextVar[Parent | None] = contextvars.ContextVar("turnstile_parent")


@contextlib.contextmanager
def parenting(
    session: Session,
    model: Any,
    run: Callable[..., Any],
    approve: Callable[[AwaitApproval], Any] | None = None,
) -> Iterator[None]:
    """While a run goes on, its sub-agents' calls run their child runs under it, their
    approvals asked of its `approve`."""
    parent = Parent(session, model, run, inspect.iscoroutinefunction(run), approve)
    token = _PARENT.set(parent)
    try:
        yield
    finally:
        _PARENT.reset(token)


_PROMPT = {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}
_ANSWERED = frozenset({StopReason.completed, StopReason.finish_tool, StopReason.stop_condition})


class SubAgent(Tool):
    """A spec (or an agent) as a tool: see `as_tool`."""

    def __init__(
        self,
        child: LoopSpec | Agent,
        spec: ToolSpec,
        model: Model | None,
        tools: Tools,
        input: type | None,
    ) -> None:
        super().__init__(self._call, spec)
        self.is_async = True  # under aio, awaited on the event loop; under sync, it returns
        self.child, self.model, self.tools, self.input = child, model, tools, input

    def check(
        self, arguments: dict[str, Any], context: ToolContext | None = None
    ) -> dict[str, Any] | ToolOutcome:
        """The child's prompt: the `prompt` argument, or the arguments as the input type takes
        them, as JSON."""
        if self.input is None:
            return super().check(arguments, context)
        try:
            value: Any = msgspec.convert(arguments, self.input)
        except msgspec.ValidationError as e:
            return ToolOutcome(f"invalid arguments for {self.name}: {e}", True)
        return {"prompt": msgspec.json.encode(value).decode(), "context": context}

    def _call(self, prompt: str, context: ToolContext[Any]) -> ToolOutcome | Awaitable[ToolOutcome]:
        parent = _PARENT.get(None)
        if parent is None:
            return ToolOutcome(
                f"{self.name} is a sub-agent: it runs only in a run of turnstile.executors.sync, "
                ".aio or .temporal",
                True,
            )
        session, call_id = parent.session, context.call_id
        path = session.child_journal(call_id)
        if isinstance(self.child, Agent):
            given: tuple[Any, dict[str, Any]] = (self.child, {})
        else:
            model = parent.model if self.model is None else self.model
            given = (self.child, {"model": model, "tools": self.tools})
        child, options = given
        options["deps"] = context.deps
        if parent.approve is not None:
            options["approve"] = self._asking(parent, call_id)
        if parent.is_async:
            return self._awaited(parent, call_id, path, child, prompt, options)
        try:
            with session.child_opened(path) as journal:
                run = parent.run(child, prompt, journal=journal, **options)
        except InvalidObservation as refused:  # an edit that does not fit: the parent's to raise
            return self._left_open(session, call_id, refused)
        return self._finished(parent, call_id, run, path)

    async def _awaited(
        self,
        parent: Parent,
        call_id: str,
        path: Any,
        child: Any,
        prompt: str,
        options: dict[str, Any],
    ) -> ToolOutcome:
        import anyio  # under aio only: `import turnstile.executors` does not pay for it

        try:
            with parent.session.child_opened(path) as journal:
                run = await parent.run(child, prompt, journal=journal, **options)
        except InvalidObservation as refused:  # an edit that does not fit: the parent's to raise
            return self._left_open(parent.session, call_id, refused)
        await anyio.lowlevel.checkpoint()  # the child ended on the parent's cancel: it goes on
        return self._finished(parent, call_id, run, path)

    def _asking(self, parent: Parent, call_id: str) -> Callable[[AwaitApproval], Any]:
        """The child's approver: the parent's, asked with each request as a `ChildApproval`
        naming this call (async if the parent's is)."""
        approve, via = parent.approve, (self.name, call_id)
        assert approve is not None

        def asked(command: AwaitApproval) -> ChildApproval:
            return self._request(command, via)

        if parent.is_async and is_async(approve):

            async def ask(command: AwaitApproval) -> Any:
                return await approve(asked(command))

            return ask
        return lambda command: approve(asked(command))

    def _request(self, command: AwaitApproval, via: tuple[str, str]) -> ChildApproval:
        """`command`, of the child run of call `via`, as the parent's request."""
        child = self.child
        spec, tools = (child.spec, child.tools) if isinstance(child, Agent) else (child, self.tools)
        if not spec.tools and type(command) is not ChildApproval:
            from ._toolbox import as_runner

            spec = msgspec.structs.replace(spec, tools=tuple(as_runner(tools).specs))
        return came_through(command, via, spec.tools)

    def _left_open(
        self, session: Session, call_id: str, held: list[ChildApproval] | InvalidObservation
    ) -> ToolOutcome:
        """The call is left open (`Session.child_waits`): its result, this, is not recorded."""
        session.child_waits(call_id, held)
        return ToolOutcome(f"{self.name} is left open", True)

    def _finished(self, parent: Parent, call_id: str, run: Run, path: Any) -> ToolOutcome:
        """The child's answer as the call's result (`answered`); the child is kept, its spending
        counted, by the parent. A journaled child left waiting for approvals no one answers now
        stops the parent too, its call left open (`Session.child_waits`) to resume the child
        where it waits."""
        session = parent.session
        if run.finish is None and path is not None and parent.approve is None:
            session.children[call_id] = run
            waiting = [self._request(c, (self.name, call_id)) for c in run.waiting]
            return self._left_open(session, call_id, waiting)
        session.child_finished(call_id, run)
        return answered(self.name, run)


def answered(name: str, run: Run) -> ToolOutcome:
    """The answer of the child `run` of the sub-agent `name` as its call's result (text, or its
    typed output as JSON), or an error saying how it stopped: the same under every executor."""
    finish = run.finish
    if finish is None:
        names = ", ".join(c.name for c in run.waiting)
        return ToolOutcome(f"{name} stopped: it waits for approval of {names}", True)
    output = finish.output
    text = output if isinstance(output, str) else msgspec.json.encode(output).decode()
    if finish.reason in _ANSWERED:
        return ToolOutcome(text)
    error = run.error
    why = error.message if error is not None else (f"its last answer: {text}" if output else "")
    return ToolOutcome(
        f"{name} stopped ({finish.reason.value}) before its answer" + (f": {why}" if why else ""),
        True,
    )


def as_tool(
    agent: LoopSpec | Agent,
    *,
    name: str,
    description: str,
    model: Model | None = None,
    tools: Tools = (),
    input: type | None = None,
) -> Tool:
    """`agent` (a spec, or an `Agent` with its model and tools) as a tool another run offers
    its model: each call runs a child run of it, from the call's `prompt` (or, given an
    `input` type, the arguments it takes, as JSON), under the parent's executor (`sync`, `aio`
    on the same event loop, Temporal as a child workflow of a worker given it). The result is
    the child's answer (its text, or its typed output as JSON); a child that stops without one
    gives an error result saying how.

    A spec's child asks `model` (default: the parent's client) and runs `tools`; it gets the
    parent's `deps`. A journaled parent journals each child beside its own journal, named by
    the call (`Session.child_journal`), so a resumed parent resumes the child where it was:
    the call is replay-safe, the child's own calls are not made twice. What the child spends
    (tokens, cost by its spec's prices) counts in the parent's totals and budgets. Raises
    `TypeError` for an agent given a `model=` or `tools=` of the call's own."""
    if isinstance(agent, Agent) and (model is not None or tools != ()):
        raise TypeError("the agent has its model and tools: give them to Agent(...), not here")
    if not isinstance(agent, LoopSpec | Agent):
        raise TypeError(f"as_tool takes a LoopSpec or an Agent, not {type(agent).__name__}")
    parameters = _PROMPT
    if input is not None:
        (ref,), defs = msgspec.json.schema_components([input], ref_template="#/$defs/{name}")
        parameters = dict(defs.pop(ref["$ref"].rsplit("/", 1)[1]))
        parameters.pop("title", None)
        if defs:
            parameters["$defs"] = defs
    spec = ToolSpec(name, description, parameters=parameters, replay_safe=True)
    return SubAgent(
        agent, spec, model, tools if isinstance(tools, ToolRunner) else tuple(tools), input
    )
