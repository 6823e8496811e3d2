"""Three agents with a bug planted in each, as the source of a module (`BUGS`: the buggy line
and its fix), for the simulation's tests to find, shrink, keep as a regression file and see
pass once fixed."""

from __future__ import annotations

HEAD = """
from turnstile.core import Guards, LoopSpec, StopReason, tool
from turnstile.core.conditions import HasToolCall
from turnstile.core.messages import AssistantMessage, ModelResponse, ModelStop, Text, ToolCall
"""

BANK = """
LEDGER: list[int] = []

@tool(replay_safe={safe})  # charging twice charges twice
def charge(order: int) -> str:
    '''Charge an order.'''
    LEDGER.append(order)
    return f"charged order {{order}}"

def no_double_charge(state) -> bool:
    '''No order is charged twice.'''
    return len(LEDGER) == len(set(LEDGER))

simulation = dict(
    spec=LoopSpec(),
    prompt="Charge order 42.",
    model=[
        ModelResponse([ToolCall("c1", "charge", {{"order": 42}})], ModelStop.tool_use),
        ModelResponse([Text("Charged.")], ModelStop.end_turn),
    ],
    tools=[charge],
    invariants=[no_double_charge],
    reset=LEDGER.clear,
)
"""

RESEARCH = """
@tool
def search(query: str) -> str:
    '''Search the web.'''
    return f"results for {{query}}"

@tool
def submit(answer: str) -> str:
    '''Hand the answer in.'''
    return "submitted"

def model(request):
    turn = sum(type(m) is AssistantMessage for m in request.messages)
    if request.purpose == "finalize":
        return ModelResponse([Text("Out of turns.")], ModelStop.end_turn)
    if turn < 2:
        call = ToolCall(f"c{{turn}}", "search", {{"query": f"q{{turn}}"}})
    else:
        call = ToolCall(f"c{{turn}}", "submit", {{"answer": f"a{{turn}}"}})
    return ModelResponse([call], ModelStop.tool_use)

simulation = dict(
    spec=LoopSpec(guards=Guards(max_turns=6), stop_when=(HasToolCall({stop!r}),)),
    prompt="Find the answer, then submit it.",
    model=model,
    tools=[search, submit],
    expect={{StopReason.stop_condition}},
)
"""

CRAWLER = """
@tool(timeout_s={timeout})
def fetch(url: str) -> str:
    '''Fetch a page.'''
    return f"the page at {{url}}"

simulation = dict(
    spec=LoopSpec(guards=Guards(deadline_s=None)),
    prompt="Fetch three pages.",
    model=[
        ModelResponse(
            [ToolCall(f"c{{i}}", "fetch", {{"url": f"https://x.org/{{i}}"}}) for i in range(3)],
            ModelStop.tool_use,
        ),
        ModelResponse([Text("Fetched.")], ModelStop.end_turn),
    ],
    tools=[fetch],
)
"""

BUGS = {
    "replay_safe": (BANK, {"safe": True}, {"safe": False}, "no_double_charge"),
    "stop_condition": (RESEARCH, {"stop": "sumbit"}, {"stop": "submit"}, "expected_outcome"),
    "hang": (CRAWLER, {"timeout": None}, {"timeout": 30}, "no_hang"),
}
"""Each bug: its module's source, the buggy and the fixed values, the invariant it breaks."""


def source(bug: str, fixed: bool) -> str:
    body, buggy, fix, _ = BUGS[bug]
    return HEAD + body.format(**(fix if fixed else buggy))
