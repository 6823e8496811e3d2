"""The same scripted workload through other agent frameworks, next to turnstile in the same run.

Workload: a scripted model answers N times with a text and one call of a trivial tool (which
returns "ok"), then once with a final text; each framework runs its own loop, tool dispatch and
history. Figures are µs per turn (the whole run / N). The baseline is `bench.core.turns_loop`
(the core alone, measured in the same rounds); turnstile's sync executor with a scripted model,
the closest match to what the peers do, is reported beside it. Peers run up to `MAX_N` turns:
their history handling grows with N (at N = 1000 a single run took about a minute).
"""

from __future__ import annotations

__all__ = ["PEERS", "rows"]

import gc
import importlib.util
import time
from collections.abc import Callable, Iterator
from typing import Any

from turnstile.core import LoopSpec, tool
from turnstile.core.messages import ModelResponse, ModelStop, Text, ToolCall, Usage
from turnstile.executors import ScriptedModel, sync

from . import core
from ._measure import Figure

Row = tuple[str, str, str, str, str]
Workload = Callable[[int], object]

PEERS = {"pydantic-ai": "pydantic_ai", "openai-agents": "agents", "langgraph": "langgraph"}
"""Each peer's name in the table and the module it is imported as."""
INSTALL = "skipped: pip install -e '.[bench-peers]'"
MAX_N = 100
MAX_TIMES = 5
CORE = "turnstile core (turns_loop)"
SYNC = "turnstile sync.run"


# -- turnstile -----------------------------------------------------------------------------------


@tool
def lookup(i: int) -> str:
    """Look up `i`."""
    return "ok"


def _script(n: int) -> list[ModelResponse]:
    replies = [
        ModelResponse(
            [Text("checking"), ToolCall(f"call_{i}", "lookup", {"i": i})],
            ModelStop.tool_use,
            Usage(100 + i, 20),
        )
        for i in range(n)
    ]
    return [*replies, ModelResponse([Text("done")], ModelStop.end_turn, Usage(100 + n, 5))]


SYNC_SPEC = LoopSpec(tools=(lookup.spec,), guards=core.SPEC.guards)


def turnstile_sync(n: int) -> object:
    run = sync.run(SYNC_SPEC, "go", model=ScriptedModel(_script(n)), tools=[lookup])
    return _done(run, run.finish.output if run.finish else None)


def _done(result: object, output: object) -> object:
    """`result`, once the run ended with the script's final answer (else the workload is wrong)."""
    if output != "done":
        raise RuntimeError(f"the scripted run ended with {output!r}, not the final answer")
    return result


# -- peers ---------------------------------------------------------------------------------------


class _Script:
    """The replies of the current run, handed out one per model call; the agent (or graph) that
    reads it is built once, so a run costs only the run."""

    def __init__(self) -> None:
        self.replies: Iterator[Any] = iter(())

    def next(self, *args: Any, **kwargs: Any) -> Any:
        return next(self.replies)


def pydantic_ai() -> Workload:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse as Reply
    from pydantic_ai.messages import TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import UsageLimits

    script = _Script()
    agent = Agent(FunctionModel(script.next))

    @agent.tool_plain
    def lookup(i: int) -> str:
        """Look up `i`."""
        return "ok"

    def workload(n: int) -> object:
        parts = [
            [TextPart("checking"), ToolCallPart("lookup", {"i": i}, tool_call_id=f"call_{i}")]
            for i in range(n)
        ]
        script.replies = iter([*(Reply(parts=p) for p in parts), Reply(parts=[TextPart("done")])])
        result = agent.run_sync("go", usage_limits=UsageLimits(request_limit=None))
        return _done(result, result.output)

    return workload


def openai_agents() -> Workload:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse as Reply
    from agents.models.interface import Model
    from agents.testing import assistant_message, function_call
    from agents.usage import Usage as AgentsUsage

    set_tracing_disabled(True)  # no trace export: nothing may touch the network
    script = _Script()

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            return script.next()

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the workload does not stream")

    @function_tool
    def lookup(i: int) -> str:
        """Look up `i`."""
        return "ok"

    agent = Agent(name="bench", model=Scripted(), tools=[lookup])

    def workload(n: int) -> object:
        outputs = [
            [
                assistant_message("checking", item_id=f"msg_{i}"),
                function_call("lookup", {"i": i}, call_id=f"call_{i}"),
            ]
            for i in range(n)
        ]
        outputs.append([assistant_message("done")])
        script.replies = iter(
            [Reply(output=o, usage=AgentsUsage(), response_id=None) for o in outputs]
        )
        result = Runner.run_sync(agent, "go", max_turns=n + 2)
        return _done(result, result.final_output)

    return workload


def langgraph() -> Workload:
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage
    from langchain_core.tools import tool as langchain_tool
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode, tools_condition

    # built by call, not by class statement: the annotations must be objects, not strings
    state = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages]})  # noqa: UP013
    script = _Script()

    @langchain_tool
    def lookup(i: int) -> str:
        """Look up `i`."""
        return "ok"

    graph = StateGraph(state)
    graph.add_node("model", lambda _: {"messages": [script.next()]})
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    app = graph.compile()

    def workload(n: int) -> object:
        calls = [
            {"name": "lookup", "args": {"i": i}, "id": f"call_{i}", "type": "tool_call"}
            for i in range(n)
        ]
        replies = [AIMessage(content="checking", tool_calls=[call]) for call in calls]
        script.replies = iter([*replies, AIMessage(content="done")])
        out = app.invoke({"messages": [("user", "go")]}, {"recursion_limit": 2 * n + 5})
        return _done(out, out["messages"][-1].content)

    return workload


BUILDERS: dict[str, Callable[[], Workload]] = {
    "pydantic-ai": pydantic_ai,
    "openai-agents": openai_agents,
    "langgraph": langgraph,
}


def installed(peer: str) -> bool:
    return importlib.util.find_spec(PEERS[peer]) is not None


# -- the table -----------------------------------------------------------------------------------


def _per_turn_us(workload: Workload, n: int) -> float:
    gc.collect()
    start = time.perf_counter_ns()
    workload(n)
    return (time.perf_counter_ns() - start) / n / 1000


def rows(sizes: list[int], times: int) -> list[Row]:
    """µs per turn of each installed peer at each N up to `MAX_N`, interleaved round by round
    with turnstile's core loop and sync executor, and their ratios to the core loop."""
    workloads: dict[str, Workload] = {CORE: core.turns_loop, SYNC: turnstile_sync}
    workloads |= {peer: BUILDERS[peer]() for peer in PEERS if installed(peer)}
    for workload in workloads.values():
        workload(2)  # imports and first-call setup stay out of the figures
    ns = [n for n in sizes if n <= MAX_N]
    rounds = min(times, MAX_TIMES)
    values: dict[tuple[str, int], list[float]] = {(w, n): [] for w in workloads for n in ns}
    for _ in range(rounds):
        for n in ns:
            for name, workload in workloads.items():
                values[(name, n)].append(_per_turn_us(workload, n))
    out: list[Row] = []
    for n in ns:
        base = values[(CORE, n)]
        executor = values[(SYNC, n)]
        for name in workloads:
            ours = values[(name, n)]
            if name == CORE:
                against = "(the baseline)"
            else:
                ratio = Figure.of([a / b for a, b in zip(ours, base, strict=True)]).median
                against = f"core {Figure.of(base).median:,.2f} → ×{ratio:,.1f}"
            if name not in (CORE, SYNC):
                beside = Figure.of([a / b for a, b in zip(ours, executor, strict=True)]).median
                against += f"; sync.run ×{beside:,.1f}"
            out.append(
                (
                    f"peer µs/turn · {name}",
                    str(n),
                    str(Figure.of(ours)),
                    against,
                    f"no target; median of {rounds}",
                )
            )
    out += [
        (f"peer µs/turn · {peer}", str(n), f"not run above N={MAX_N}", "", "")
        for n in sizes
        if n > MAX_N
        for peer in PEERS
        if installed(peer)
    ]
    out += [
        (f"peer µs/turn · {peer}", "", INSTALL, "", "") for peer in PEERS if not installed(peer)
    ]
    return out
