"""The `turnstile` command. User mistakes end in one line on stderr and exit code 2.

`run` and `replay` use a provider's SDK and `validate` may replay a trace; those imports wait
until such a command runs, so the rest (`turnstile demo` among it) needs only the core's
dependencies and starts fast.
"""

from __future__ import annotations

__all__ = ["main"]

import argparse
import importlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import msgspec
from turnstile.core import (
    CallModel,
    Command,
    CorruptState,
    Loop,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    TurnstileError,
)
from turnstile.core.decoding import decoded
from turnstile.core.diagram import dot, mermaid
from turnstile.core.messages import HistoryProblem, history_problems
from turnstile.executors import CorruptJournal, Journal, RunFailed, TornJournal, sync, transcript
from turnstile.executors._journal import MAGIC as JOURNAL_MAGIC
from turnstile.providers import Delta, TextDelta, model_client

_SPEC = msgspec.json.Decoder(LoopSpec).decode


class UsageError(Exception):
    """A mistake on the command line or in a file named on it."""


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def _spec(given: str | None) -> LoopSpec:
    """The spec given with `--spec`: a file holding a `LoopSpec` as JSON, or where one lives in
    code as "module:attribute" (imported from the current folder, as `python -m` would);
    without one, the default spec."""
    if given is None:
        return LoopSpec()
    if not Path(given).exists() and ":" in given:
        module, _, name = given.partition(":")
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own modules
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise UsageError(f"cannot import the spec {given}: {e}") from None
        if not isinstance(found, LoopSpec):
            raise UsageError(
                f"{given}: not a LoopSpec but an object of type {type(found).__name__}"
            )
        return found
    data = _read(given)
    return decoded(_SPEC, data, lambda why: UsageError(f"{given}: not a LoopSpec: {why}"))


def _load(path: str, spec: str | None, data: bytes | None = None) -> tuple[Loop, int | None]:
    """The loop a state dump or a journal holds, and the journal's count of events (None for
    a dump). A journal's torn tail is reported on one line of stderr, and left as it is."""
    data = _read(path) if data is None else data
    if not data.startswith(JOURNAL_MAGIC):
        try:
            return Loop.load(_spec(spec), data), None
        except CorruptState as e:
            raise UsageError(f"{path}: {e}") from None
    with warnings.catch_warnings(record=True) as torn:
        warnings.simplefilter("always", TornJournal)
        try:
            loop = Journal.replay(path, _spec(spec))
        except CorruptJournal as e:
            hint = (
                " (its spec may be needed, for its stop conditions, its output type or, in a "
                "journal from before runs recorded their tools, its tools: give it with --spec)"
                if spec is None
                else ""
            )
            raise UsageError(f"{e}{hint}") from None
    for warning in torn:
        print(f"turnstile: warning: {warning.message}", file=sys.stderr)
    return loop, len(loop.state.events)


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    print(transcript(run_demo().state))
    return 0


def _show(args: argparse.Namespace) -> int:
    print(transcript(_load(args.state, args.spec)[0].state))
    return 0


def _validate(args: argparse.Namespace) -> int:
    path = args.path
    data = _read(path)
    is_trace = _is_trace(path, data)
    if is_trace:
        problems = _trace_problems(path, data)
        if problems:
            for where, problem in problems:
                print(f"{path}: {where}: {problem}", file=sys.stderr)
            return 1
        print(f"{path}: valid")
        return 0
    # a state or journal that loads has a valid history: loading checks it
    loop, events = _load(path, args.spec, data)
    count = f"{len(loop.state.messages)} messages"
    print(
        f"{path}: valid ({count})"
        if events is None
        else f"{path}: valid journal ({events} events, {count})"
    )
    return 0


_TRACE_KEYS = frozenset({"format", "provider", "hand_written", "exchanges", "loop"})
_STATE_KEYS = frozenset({"schema", "state"})


def _is_trace(path: str, data: bytes) -> bool:
    """Whether the file is a trace (else a state dump or a journal), told by its top-level keys,
    so that a trace with a mistake in it is reported as one."""
    if data.startswith(JOURNAL_MAGIC):
        return False
    value = decoded(
        msgspec.json.decode,
        data,
        lambda why: UsageError(f"{path}: not JSON: {_json_error(data, why)}"),
    )
    keys = value.keys() if isinstance(value, dict) else set()
    if keys & _STATE_KEYS:
        return False
    if keys & _TRACE_KEYS:
        return True
    raise UsageError(
        f"{path}: neither a trace (`format`, `provider`, `exchanges`...) nor a state dump "
        "(`schema`, `state`)"
    )


def _json_error(data: bytes, reason: str) -> str:
    """What is wrong with `data` as JSON, by line and column where the standard library's
    decoder can say (msgspec counts bytes)."""
    try:
        json.loads(data)
    except json.JSONDecodeError as e:
        return f"{e.msg} (line {e.lineno}, column {e.colno})"
    except (ValueError, RecursionError):  # not UTF-8, too deep
        pass
    return reason


def _trace_problems(path: str, data: bytes) -> list[tuple[str, HistoryProblem]]:
    """Replay the trace and check the history of every request it makes and of its end."""
    from turnstile.executors.testing import replay
    from turnstile.providers.replay import ReplayMismatch, Trace, TraceError

    decode = msgspec.json.Decoder(Trace).decode
    trace = decoded(decode, data, lambda why: UsageError(f"{path}: not a valid trace: {why}"))
    requests: list[CallModel] = []
    try:
        run = replay(trace, on_step=lambda s: requests.append(s) if type(s) is CallModel else None)
    except (TraceError, ReplayMismatch) as e:
        raise UsageError(f"{path}: cannot replay: {e}") from None
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


def _print_delta(delta: Delta) -> None:
    if type(delta) is TextDelta:
        print(delta.text, end="", file=sys.stderr, flush=True)


def _end_reply(step: Command | Observation) -> None:
    if type(step) is ModelReplied or type(step) is ModelFailed:
        print(file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    """Run the loop once against the API; print the transcript. Exit 1, saying why on stderr, if
    the run failed (`Run.error`)."""
    delta, step = (_print_delta, _end_reply) if args.stream else (None, None)
    model = args.provider if args.model is None else f"{args.provider}:{args.model}"
    client = model_client(model, stream=args.stream, on_delta=delta)
    spec = LoopSpec(system=args.system, max_tokens=args.max_tokens)
    run = sync.run(spec, args.prompt, model=client, on_step=step)
    print(transcript(run.state))
    try:
        run.raise_for_error()
    except RunFailed as failed:
        print(f"turnstile: {failed}", file=sys.stderr)
        return 1
    return 0


def _replay(args: argparse.Namespace) -> int:
    """Replay a trace; print the transcript. Exit 1, with the diff, if the run left the trace."""
    from turnstile.executors.testing import replay
    from turnstile.providers.replay import ReplayMismatch, TraceError

    try:
        run = replay(args.trace)
    except OSError as err:
        raise UsageError(f"cannot read {args.trace}: {err.strerror}") from None
    except TraceError as err:
        raise UsageError(f"not a replayable trace: {err}") from None
    except ReplayMismatch as err:
        print(f"{args.trace}: the replay left the recording: {err}", file=sys.stderr)
        return 1
    print(transcript(run.state))
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (no usage dump), like every other error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="turnstile", description="Run and inspect agent loops.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="answer the weather question offline").set_defaults(fn=_demo)
    spec_help = 'the run\'s LoopSpec, as a JSON file or "module:attribute" (runs with tools)'
    show = sub.add_parser("show", help="print a dumped state or a journal as a transcript")
    show.add_argument("state", metavar="STATE|JOURNAL")
    show.add_argument("--spec", metavar="SPEC", help=spec_help)
    show.set_defaults(fn=_show)
    check = sub.add_parser("validate", help="check a trace, a dumped state or a journal")
    check.add_argument("path", metavar="TRACE|STATE|JOURNAL")
    check.add_argument("--spec", metavar="SPEC", help=spec_help)
    check.set_defaults(fn=_validate)
    draw = sub.add_parser("diagram", help="draw the loop's state machine")
    draw.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    draw.set_defaults(fn=_diagram)
    run = sub.add_parser("run", help="answer a prompt with a provider's API (no tools)")
    run.add_argument(
        "--provider", required=True, help="anthropic, openai (Chat Completions), openai-responses"
    )
    run.add_argument("--model", help="the model's name (default: the format's default)")
    run.add_argument("--stream", action="store_true", help="stream the reply, text to stderr")
    run.add_argument("--system", help="a system prompt")
    run.add_argument(
        "--max-tokens",
        type=int,
        default=LoopSpec().max_tokens,
        metavar="N",
        help="the token limit of each reply (default: %(default)s)",
    )
    run.add_argument("prompt")
    run.set_defaults(fn=_run)
    replay = sub.add_parser("replay", help="replay a recorded trace, print its transcript")
    replay.add_argument("trace")
    replay.set_defaults(fn=_replay)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = int(args.fn(args))
        sys.stdout.flush()  # here, where a reader that went away can be told from a bug
    except (UsageError, TurnstileError) as e:
        print(f"turnstile: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `turnstile diagram | head`: the reader has all it wanted
        # what is still buffered goes nowhere, so the flush at exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
