"""The `turnstile` command. User mistakes end in one line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["main"]

import argparse
import sys
from pathlib import Path

from turnstile.core import (
    CorruptState,
    InvalidHistory,
    Loop,
    LoopSpec,
    TurnstileError,
    mermaid,
    validate_history,
)

from ._transcript import transcript


class UsageError(Exception):
    """A mistake on the command line or in a file named on it."""


def _load(path: str) -> Loop:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    try:
        return Loop.load(LoopSpec(), data)
    except CorruptState as e:
        raise UsageError(f"{path}: {e}") from None


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    print(transcript(run_demo().state))
    return 0


def _show(args: argparse.Namespace) -> int:
    print(transcript(_load(args.state).state))
    return 0


def _validate(args: argparse.Namespace) -> int:
    state = _load(args.state).state
    try:
        validate_history(state.messages, allow_pending=bool(state.outstanding))
    except InvalidHistory as e:
        for problem in e.problems:
            print(f"{args.state}: {problem}", file=sys.stderr)
        return 1
    print(f"{args.state}: valid ({len(state.messages)} messages)")
    return 0


def _diagram(args: argparse.Namespace) -> int:
    print(mermaid())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="turnstile", description="Run and inspect agent loops.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="answer the weather question offline").set_defaults(fn=_demo)
    show = sub.add_parser("show", help="print a dumped state as a transcript")
    show.add_argument("state")
    show.set_defaults(fn=_show)
    check = sub.add_parser("validate", help="check a dumped state's history")
    check.add_argument("state")
    check.set_defaults(fn=_validate)
    sub.add_parser("diagram", help="the loop's state machine as Mermaid").set_defaults(fn=_diagram)
    from turnstile.providers._cli import add_commands

    add_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (UsageError, TurnstileError) as e:
        print(f"turnstile: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
