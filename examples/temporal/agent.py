"""A run that outlives its worker, on Temporal (a server at ADDRESS; see the docs' "Runs on
Temporal", docs/how-to/temporal.md):

    python -m examples.temporal.agent worker ADDRESS QUEUE LOG   # serve QUEUE until killed
    python -m examples.temporal.agent run ADDRESS QUEUE ID       # start run ID, wait, print it

The run is examples/durable's: three turns of two payments each, a balance, an answer, from a
scripted model (no key needed). Every model call and tool call writes a line to LOG as it
begins (`model N`, `start CALL_ID`, `balance CALL_ID`) and a payment another as it ends (`paid
CALL_ID`), each after `SLOW_S`, so a kill can land inside any of them and the log shows what
ran how often. The kill -9 tests (tests/executors/test_temporal.py) run it too.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from pathlib import Path

from turnstile.core import LoopSpec, ModelRequest, ToolContext, tool
from turnstile.core.messages import (
    AssistantMessage,
    ModelResponse,
    ModelStop,
    Text,
    ToolCall,
    ToolResults,
)
from turnstile.executors import ScriptedModel, temporal

SLOW_S = 0.4
LOG = Path("temporal-agent.log")


def note(line: str) -> None:
    with LOG.open("a") as log:
        log.write(line + "\n")


@tool
def pay(invoice: str, context: ToolContext) -> str:
    """Pay an invoice: not replay-safe, paying twice costs twice."""
    note(f"start {context.call_id}")
    time.sleep(SLOW_S)
    note(f"paid {context.call_id}")
    return f"paid {invoice}"


@tool(replay_safe=True)
def balance(context: ToolContext) -> str:
    """The account's balance: reading it twice does no harm."""
    note(f"balance {context.call_id}")
    time.sleep(SLOW_S)
    return "400 EUR"


SPEC = LoopSpec(tools=(pay.spec, balance.spec))
PROMPT = "Pay invoices 1 to 6, then tell me the balance."
PAYMENTS = [f"pay-{n}" for n in range(1, 7)]


def model(request: ModelRequest) -> ModelResponse:
    """Answers from the conversation so far, so whichever worker asks gets the reply owed."""
    turn = sum(type(m) is AssistantMessage for m in request.messages)
    note(f"model {turn}")
    time.sleep(SLOW_S)
    if turn < 3:
        calls = [
            ToolCall(f"pay-{2 * turn + k}", "pay", {"invoice": str(2 * turn + k)}) for k in (1, 2)
        ]
        return ModelResponse(
            [Text(f"Paying {2 * turn + 1}, {2 * turn + 2}."), *calls], ModelStop.tool_use
        )
    if turn == 3:
        return ModelResponse([ToolCall("bal", "balance", {})], ModelStop.tool_use)
    return ModelResponse([Text("Paid (or reported), balance checked.")], ModelStop.end_turn)


async def serve(address: str, queue: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    worker = temporal.worker(
        client,
        models={"scripted": ScriptedModel(model)},
        tools=[pay, balance],
        task_queue=queue,
        # a killed worker's runs go back to the shared queue after this, not the default 10 s
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    )
    await worker.run()


FAST = temporal.Options(heartbeat_s=1.0, retry_interval_s=0.2)
"""A lost worker is noticed within a second, and its calls retried 0.2 s later."""


async def start_and_wait(address: str, queue: str, run_id: str) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    handle = await temporal.start(
        client, SPEC, PROMPT, model="scripted", id=run_id, task_queue=queue, options=FAST
    )
    run = await handle.result()
    print(run.stop_reason.value, run.output)
    for message in run.messages:
        if type(message) is ToolResults:
            for result in message.results:
                print(f"{result.call_id}: {result.content}")


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["worker", address, queue, log]:
            LOG = Path(log)
            asyncio.run(serve(address, queue))
        case ["run", address, queue, run_id]:
            asyncio.run(start_and_wait(address, queue, run_id))
        case _:
            sys.exit(__doc__)
