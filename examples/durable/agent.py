"""A run that outlives its process: `python -m examples.durable.agent JOURNAL` starts the run
the journal does not hold yet, or resumes the one it holds (after a kill -9, say).

The model is scripted (no key needed): three turns, each paying two invoices, then a summary.
`pay` is not replay-safe (paying twice costs twice), so a payment a crash interrupted is not
made again: the model is told it may or may not have gone through. `balance` is replay-safe.
Each payment is appended to `payments.log` beside the journal, with the call's id.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import msgspec
from turnstile.core import LoopSpec, ModelRequest, ToolContext, tool
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Part,
    Text,
    ToolCall,
    Usage,
    estimate_tokens,
)
from turnstile.executors import ScriptedModel, sync

LOG = Path("payments.log")
"""Where payments are written: beside the journal when run as a script."""


@tool
def pay(invoice: str, context: ToolContext) -> str:
    """Pay an invoice. The call id is the key a payment API would take to refuse a double."""
    time.sleep(0.3)  # the bank is slow: a kill lands here now and then
    with LOG.open("a") as log:
        log.write(f"paid {invoice} {context.call_id}\n")
    return f"paid {invoice}"


@tool(replay_safe=True)
def balance() -> str:
    """The account's balance: reading it twice does no harm."""
    return f"{1000 - 100 * len(LOG.read_text().splitlines()) if LOG.exists() else 1000} EUR"


SPEC = LoopSpec(tools=(pay.spec, balance.spec))
PROMPT = "Pay invoices 1 to 6, then tell me the balance."


def model(request: ModelRequest) -> ModelResponse:
    """The scripted model: answers from the conversation so far, so a resumed run gets the
    reply it is owed, whichever process asks."""
    turn = sum(type(m) is AssistantMessage for m in request.messages)
    content: list[Part]
    if turn < 3:
        calls = [
            ToolCall(f"pay-{2 * turn + k}", "pay", {"invoice": str(2 * turn + k)}) for k in (1, 2)
        ]
        content = [Text(f"Paying {2 * turn + 1} and {2 * turn + 2}."), *calls]
    elif turn == 3:
        content = [ToolCall("bal", "balance", {})]
    else:
        content = [Text("All six are paid (or reported), balance checked.")]
    stop = ModelStop.tool_use if turn <= 3 else ModelStop.end_turn
    return ModelResponse(content, stop, usage(request, content))


def usage(request: ModelRequest, content: list[Part]) -> Usage:
    """The tokens a real model would count for this call, estimated as the loop estimates them
    (what it sent: system prompt, messages, tools; what it wrote)."""
    sent = [request.system, list(request.messages), list(request.tools)]
    return Usage(
        estimate_tokens(msgspec.json.encode(sent).decode()),
        estimate_tokens(msgspec.json.encode(content).decode()),
    )


if __name__ == "__main__":
    journal = sys.argv[1]
    LOG = Path(journal).parent / "payments.log"
    run = sync.run(SPEC, PROMPT, model=ScriptedModel(model), tools=[pay, balance], journal=journal)
    print(run.stop_reason.value, run.output)
