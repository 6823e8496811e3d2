"""`turnstile fork JOURNAL --at POINT [a change] -o BRANCH`: a fork of a journal's run, written
to a journal of its own that `turnstile run AGENT --journal BRANCH` continues."""

from __future__ import annotations

__all__ = ["add_fork"]

import argparse
import json
from typing import Any

from turnstile.core import ToolOutcome

from ._fork import fork


class _Mistake(Exception):
    """A value on the command line that cannot be used (the caller says it on one line)."""


def _result(given: str) -> tuple[str, ToolOutcome]:
    call_id, sep, value = given.partition("=")
    if not sep or not call_id:
        raise _Mistake(f"--result {given!r}: say CALL=JSON (a call id, its result as JSON)")
    try:
        content: Any = json.loads(value)
    except json.JSONDecodeError as e:
        raise _Mistake(f"--result {call_id}: not JSON: {e.msg}") from None
    if not isinstance(content, str | list):
        content = json.dumps(content, ensure_ascii=False)  # a dict: the text a tool sends
    return call_id, ToolOutcome(content)


def _at(given: str | None) -> int | str | None:
    return int(given) if given is not None and given.lstrip("-").isdigit() else given


def _fork(args: argparse.Namespace, usage: type[Exception]) -> int:
    try:
        results = dict(_result(r) for r in args.result)
    except _Mistake as e:
        raise usage(str(e)) from None
    approvals: dict[str, bool | str] = dict.fromkeys(args.approve, True)
    approvals.update({d.partition("=")[0]: d.partition("=")[2] or False for d in args.deny})
    try:
        fork(
            args.journal,
            _at(args.at),
            journal=args.out,
            prompt=args.prompt,
            model=args.model,
            system=args.system,
            results=results,
            approvals=approvals,
            policy=args.policy,
        )
    except (ValueError, OSError) as e:
        raise usage(f"cannot fork {args.journal}: {e}") from None
    print(f"{args.out}: forked; continue it with turnstile run AGENT --journal {args.out}")
    return 0


def add_fork(sub: Any, usage: type[Exception]) -> None:
    """Register `fork` on the `turnstile` parser's subcommands; `usage` is its one-line error."""
    p = sub.add_parser(
        "fork",
        help="fork a journal's run at an event, one thing changed (then: run --journal)",
        description="turnstile fork JOURNAL --at turn:N [--prompt T|--model M|--result ID=JSON]"
        " -o BRANCH",
    )
    p.add_argument("journal", metavar="JOURNAL")
    p.add_argument("--at", help="an event index, turn:N (before the N-th reply) or call:ID")
    p.add_argument("-o", "--out", required=True, metavar="BRANCH", help="the fork's journal")
    p.add_argument("--prompt", help="a message sent at that point (a new prompt)")
    p.add_argument("--model", help="the model to ask from that point on")
    p.add_argument("--system", help="the system instructions from that point on")
    p.add_argument(
        "--result", action="append", default=[], metavar="CALL=JSON", help="a tool's result"
    )
    p.add_argument("--approve", action="append", default=[], metavar="CALL")
    p.add_argument("--deny", action="append", default=[], metavar="CALL[=REASON]")
    p.add_argument(
        "--policy",
        choices=["recorded", "replay_safe"],
        default="recorded",
        help="serve every recorded tool result, or run replay-safe tools again",
    )
    p.set_defaults(fn=lambda args: _fork(args, usage))
