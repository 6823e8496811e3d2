"""The `turnstile` command. User mistakes end in one line on stderr and exit code 2.

`turnstile run module:agent PROMPT` runs an `Agent` found in the user's code, its text streamed
as it comes, under a status line (`_console`); `--journal` keeps it resumable, and
`turnstile show --follow` follows a journal as its run writes it. `run --provider` and `replay`
use a provider's SDK and `validate` may replay a trace; those imports wait until such a command
runs, so the rest (`turnstile demo` among it) needs only the core's dependencies and starts fast.
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
from turnstile.executors import (
    Agent,
    CorruptJournal,
    Journal,
    Run,
    RunFailed,
    TornJournal,
    divergence,
    sync,
    transcript,
)
from turnstile.executors._cli_fork import add_fork
from turnstile.executors._console import Display, Mirror, follow, live_terminal
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


def _named(given: str, kind: str) -> object:
    """The object "module:attribute" names, imported from the current folder (as `python -m`
    would: the user's own modules); `kind` is what the user meant it to be."""
    module, _, name = given.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"cannot import the {kind} {given}: {e}") from None


def _spec(given: str | None) -> LoopSpec:
    """The spec given with `--spec`: a file holding a `LoopSpec` as JSON, or where one (or an
    `Agent`) lives in code as "module:attribute"; without one, the default spec."""
    if given is None:
        return LoopSpec()
    if not Path(given).exists() and ":" in given:
        found = _named(given, "spec")
        if isinstance(found, Agent):
            return found.spec
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
    if not args.follow:
        print(transcript(_load(args.state, args.spec)[0].state))
        return 0
    if not _read(args.state).startswith(JOURNAL_MAGIC):
        raise UsageError(f"{args.state}: not a journal: --follow follows a run's journal")
    try:
        follow(Path(args.state), Loop(_spec(args.spec)))
    except CorruptJournal as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        return 130
    return 0


def _diff(args: argparse.Namespace) -> int:
    a, b = (_load(path, args.spec)[0] for path in (args.a, args.b))
    found = divergence(a.state.events, b.state.events, prices=a.spec.prices)
    print(found.report())
    return 0 if found.first is None else 1


def _view(args: argparse.Namespace) -> int:
    from ._view import write_page  # only this command needs it

    runs = [(_load(path, args.spec)[0], path) for path in args.state]
    try:
        write_page(args.output, runs)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
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
    """`run AGENT [PROMPT]`, or `run --provider P PROMPT`."""
    if args.provider is not None:
        if args.prompt is not None:
            raise UsageError("run --provider takes one argument, the prompt (or an agent, alone)")
        return _run_provider(args, args.target)
    if args.target is None:
        raise UsageError("run needs an agent, as module:attribute (or --provider)")
    agent = _named(args.target, "agent")
    if not isinstance(agent, Agent):
        raise UsageError(
            f"{args.target}: not an Agent but an object of type {type(agent).__name__}"
        )
    return _run_agent(args, agent)


def _run_provider(args: argparse.Namespace, prompt: str | None) -> int:
    """Run the loop once against the API; print the transcript. Exit 1, saying why on stderr, if
    the run failed (`Run.error`)."""
    delta, step = (_print_delta, _end_reply) if args.stream else (None, None)
    model = args.provider if args.model is None else f"{args.provider}:{args.model}"
    client = model_client(model, stream=args.stream, on_delta=delta)
    spec = LoopSpec(system=args.system, max_tokens=args.max_tokens)
    try:
        run = sync.run(spec, prompt, model=client, on_step=step, journal=args.journal)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(transcript(run.state))
    return _failed(run)


def _run_agent(args: argparse.Namespace, agent: Agent) -> int:
    """Run the agent, its text streamed to stdout as it comes, a status line under it; print
    its typed answer, if it has one. Ctrl-C ends it (exit 130), resumable from its journal."""
    mirror = Mirror(_resumed(agent, args.journal))
    live = live_terminal(sys.stdout)
    display = Display(mirror, priced=bool(agent.spec.prices), out=sys.stdout, err=sys.stderr,
                      live=live)  # fmt: skip
    if mirror.loop.state.events:
        display.note(f"resuming the run in {args.journal} ({len(mirror.loop.state.events)} events)")
    try:
        with display:
            run = sync.run(
                agent,
                args.prompt,
                journal=args.journal,
                on_update=display.update,
                on_event=display.event,
                approve=display.ask if sys.stdin.isatty() else None,
            )
    except ValueError as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        again = f": resume it with turnstile run --journal {args.journal} {args.target}"
        print(f"turnstile: cancelled{again if args.journal else ''}", file=sys.stderr)
        return 130
    for waiting in run.waiting:  # no terminal to ask on
        via = "".join(f" of sub-agent {n} (call {c})" for n, c in getattr(waiting, "via", ())[::-1])
        print(
            f"turnstile: {waiting.name} ({waiting.id}){via} awaits approval: run it on a "
            "terminal to answer, or in code with approve=",
            file=sys.stderr,
        )
    if agent.spec.output is not None and run.output is not None:
        print(msgspec.json.encode(run.output).decode())
    return 1 if run.waiting else _failed(run)


def _resumed(agent: Agent, journal: str | None) -> Loop:
    """The loop a journal holds so far (a fresh one when there is none), for the status line."""
    if journal is None or not Path(journal).exists():
        return Loop(agent.spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TornJournal)
        try:
            return Journal.replay(journal, agent.spec)
        except TurnstileError:
            return Loop(agent.spec)  # the run says what is wrong with it


def _failed(run: Run) -> int:
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


class _Version(argparse.Action):
    """`--version`: the installed version, read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from turnstile.core import __version__

        print(f"turnstile {__version__}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="turnstile", description="Run and inspect agent loops.")
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="answer the weather question offline").set_defaults(fn=_demo)
    spec_help = 'the run\'s LoopSpec, as a JSON file or "module:attribute" (runs with tools)'
    show = sub.add_parser("show", help="print a dumped state or a journal as a transcript")
    show.add_argument("state", metavar="STATE|JOURNAL")
    show.add_argument("--spec", metavar="SPEC", help=spec_help)
    show.add_argument(
        "--follow", action="store_true", help="follow a journal as its run writes it, to its end"
    )
    show.set_defaults(fn=_show)
    diff = sub.add_parser("diff", help="compare two runs step by step: where do they part?")
    diff.add_argument("a", metavar="A")
    diff.add_argument("b", metavar="B", help="two journals or dumped states")
    diff.add_argument("--spec", metavar="SPEC", help=spec_help + "; its prices give costs")
    diff.set_defaults(fn=_diff)
    view = sub.add_parser("view", help="write dumped states or journals as one HTML page")
    view.add_argument("state", nargs="+", metavar="STATE|JOURNAL", help="runs forked are branches")
    view.add_argument("-o", "--output", required=True, metavar="HTML", help="the page to write")
    view.add_argument("--spec", metavar="SPEC", help=spec_help)
    view.set_defaults(fn=_view)
    check = sub.add_parser("validate", help="check a trace, a dumped state or a journal")
    check.add_argument("path", metavar="TRACE|STATE|JOURNAL")
    check.add_argument("--spec", metavar="SPEC", help=spec_help)
    check.set_defaults(fn=_validate)
    draw = sub.add_parser("diagram", help="draw the loop's state machine")
    draw.add_argument("--format", choices=["mermaid", "dot"], default="mermaid")
    draw.set_defaults(fn=_diagram)
    run = sub.add_parser(
        "run",
        help="run an agent (module:attribute) on a prompt, or a provider's model (--provider)",
        description="turnstile run module:agent PROMPT | turnstile run --provider P PROMPT",
    )
    run.add_argument("target", nargs="?", metavar="AGENT", help="where the Agent lives in code")
    run.add_argument("prompt", nargs="?", help="the prompt (none to resume a --journal)")
    run.add_argument(
        "--journal",
        metavar="PATH",
        help="keep the run's events in this file: a run cut short resumes from it",
    )
    runs = run.add_argument_group("a provider's model alone (no agent, no tools)")
    runs.add_argument("--provider", help="anthropic, openai (Chat Completions), openai-responses")
    runs.add_argument("--model", help="the model's name (default: the format's default)")
    runs.add_argument("--stream", action="store_true", help="stream the reply, text to stderr")
    runs.add_argument("--system", help="a system prompt")
    runs.add_argument(
        "--max-tokens",
        type=int,
        default=LoopSpec().max_tokens,
        metavar="N",
        help="the token limit of each reply (default: %(default)s)",
    )
    run.set_defaults(fn=_run)
    replay = sub.add_parser("replay", help="replay a recorded trace, print its transcript")
    replay.add_argument("trace")
    replay.set_defaults(fn=_replay)
    add_fork(sub, UsageError)
    from .testing._simcli import add_simulate

    add_simulate(sub)
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
