"""The `turnstile` command. User mistakes end in one line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["main"]

import argparse
import sys
from pathlib import Path
from typing import NoReturn

import msgspec
from turnstile.core import (
    CallModel,
    CorruptState,
    HistoryProblem,
    Loop,
    LoopSpec,
    TurnstileError,
    mermaid,
)
from turnstile.core._history import history_problems
from turnstile.core._machine import dot

from ._transcript import transcript


class UsageError(Exception):
    """A mistake on the command line or in a file named on it."""


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def _load(path: str, data: bytes | None = None) -> Loop:
    try:
        return Loop.load(LoopSpec(), _read(path) if data is None else data)
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
    path = args.path
    data = _read(path)
    if _is_trace(data):
        problems = _trace_problems(path)
    else:
        state = _load(path, data).state
        problems = [
            ("state", p)
            for p in history_problems(state.messages, allow_pending=bool(state.outstanding))
        ]
        count = len(state.messages)
    if problems:
        for where, problem in problems:
            print(f"{path}: {where}: {problem}", file=sys.stderr)
        return 1
    print(f"{path}: valid" + ("" if _is_trace(data) else f" ({count} messages)"))
    return 0


def _is_trace(data: bytes) -> bool:
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and "exchanges" in value


def _trace_problems(path: str) -> list[tuple[str, HistoryProblem]]:
    """Replay the trace and check the history of every request it makes and of its end."""
    from turnstile.executors.testing import replay
    from turnstile.providers._cli import ProviderUsageError
    from turnstile.providers.replay import ReplayMismatch, TraceError

    requests: list[CallModel] = []
    try:
        run = replay(path, on_step=lambda s: requests.append(s) if type(s) is CallModel else None)
    except (TraceError, ReplayMismatch) as e:
        raise ProviderUsageError(f"{path}: cannot replay: {e}") from None
    found = [(f"request {c.id}", p) for c in requests for p in history_problems(c.request.messages)]
    return found + [("final state", p) for p in history_problems(run.messages)]


def _diagram(args: argparse.Namespace) -> int:
    if args.format == "mermaid":
        print(mermaid())
        return 0
    try:
        print(dot())
    except ImportError:
        raise UsageError("--format dot needs the graphviz package: pip install graphviz") from None
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (no usage dump), like every other error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="turnstile", description="Run and inspect agent loops.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="answer the weather question offline").set_defaults(fn=_demo)
    show = sub.add_parser("show", help="print a dumped state as a transcript")
    show.add_argument("state")
    show.set_defaults(fn=_show)
    check = sub.add_parser("validate", help="check the history of a trace or a dumped state")
    check.add_argument("path", metavar="TRACE|STATE")
    check.set_defaults(fn=_validate)
    draw = sub.add_parser("diagram", help="draw the loop's state machine")
    draw.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    draw.set_defaults(fn=_diagram)
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
