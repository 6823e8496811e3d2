"""`python -m bench._kill_child ...`: one process's share of a run of the kill campaign.

It opens the run's journal and runs (or resumes) the run the journal holds, with the agent of
`bench._kill_world`, until the run finishes or the campaign kills the process. It prints
`ready` once everything is imported and built, just before it opens the journal (the campaign
times its kill from there), and `finished <stop reason>` once the journal is closed; then it
exits at once.
"""

from __future__ import annotations

__all__ = ["PROMPT", "main"]

import argparse
import functools
import os
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from turnstile.executors import Journal, Run, sync
from turnstile.executors.sandbox import Sandbox, SandboxLimits

from ._kill_world import BIG, TOOLS, Agent, plan, spec

PROMPT = "carry out the plan"


def _executor(name: str) -> Callable[..., Run]:
    """`sync.run`, or `trio.run` of the trio executor's; trio is imported only when needed (it
    takes a process's start from about 0.2 s to 0.4 s)."""
    if name == "sync":
        return sync.run
    import trio
    from turnstile.executors import aio as trio_executor

    def run(*args: Any, **kwargs: Any) -> Run:
        return trio.run(functools.partial(trio_executor.run, *args, **kwargs))

    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench._kill_child")
    p.add_argument("--journal", required=True)
    p.add_argument("--side", required=True, help="the file the tools append their call ids to")
    p.add_argument("--seed", type=int, required=True, help="the seed of the run's plan")
    p.add_argument("--executor", choices=["sync", "trio"], required=True)
    p.add_argument("--fsync", choices=["always", "batch", "round", "never"], required=True)
    p.add_argument("--sandbox", action="store_true", help="run each call in a Sandbox")
    p.add_argument("--prompt", action="store_true", help="give the prompt (else resume)")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")  # a torn tail: the campaign has counted it already
    model = Agent(plan(args.seed, args.side))
    execute = _executor(args.executor)
    with ExitStack() as stack:
        tools: Any = TOOLS
        if args.sandbox:
            limits = SandboxLimits(wall_s=10, output_bytes=2 * BIG, writable_paths=(args.side,))
            tools = stack.enter_context(Sandbox(TOOLS, limits, warm=2))
        print("ready", flush=True)
        journal = stack.enter_context(Journal(args.journal, fsync=args.fsync))
        prompt = PROMPT if args.prompt else None
        run = execute(spec(), prompt, model=model, tools=tools, journal=journal)
    print(f"finished {run.stop_reason.value}", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    os._exit(code)  # the journal is closed: the interpreter's teardown (~0.2 s with trio's
    # threads about) is nothing the campaign tests, and kills there would be wasted
