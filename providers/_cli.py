"""`turnstile run` (a prompt against a provider's API) and `turnstile replay` (a recorded trace).

`add_commands(subparsers)` adds both to the `turnstile` command. Each command's `fn` takes the
parsed arguments and returns the exit code; a user's mistake raises `ProviderUsageError`, which
the command line prints as one line before exiting with 2. The SDKs are imported only when a
command runs, so the rest of the command line starts fast.
"""

from __future__ import annotations

__all__ = ["PROVIDERS", "ProviderUsageError", "add_commands"]

import argparse
import importlib
import os
import sys
from typing import Any

from turnstile.core import (
    Command,
    LoopSpec,
    ModelFailed,
    ModelReplied,
    Observation,
    StopReason,
    TurnstileError,
)
from turnstile.executors import sync, transcript

from ._deltas import Delta, TextDelta

PROVIDERS = {
    "anthropic": ("anthropic_messages", "ANTHROPIC_API_KEY"),
    "openai-chat": ("openai_chat", "OPENAI_API_KEY"),
    "openai-responses": ("openai_responses", "OPENAI_API_KEY"),
}
"""Each provider `turnstile run` knows: its format module, and the variable holding its key."""


class ProviderUsageError(TurnstileError):
    """A mistake on the command line: a missing API key, a trace that cannot be read."""


def add_commands(subparsers: Any) -> None:
    """Add `run` and `replay` to the `turnstile` command's subparsers."""
    run = subparsers.add_parser("run", help="answer a prompt with a provider's API (no tools)")
    run.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    run.add_argument("--model", help="the model name (default: the provider client's default)")
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
    replay = subparsers.add_parser("replay", help="replay a recorded trace, print its transcript")
    replay.add_argument("trace")
    replay.set_defaults(fn=_replay)


def _sdk_client(provider: str) -> Any:
    """The SDK's client, configured from the environment (key, base URL, ...) as it documents."""
    variable = PROVIDERS[provider][1]
    if not os.environ.get(variable):
        raise ProviderUsageError(f"{variable} is not set: export it to use --provider {provider}")
    if provider == "anthropic":
        import anthropic

        return anthropic.Anthropic()
    import openai

    return openai.OpenAI()


def _print_delta(delta: Delta) -> None:
    if type(delta) is TextDelta:
        print(delta.text, end="", file=sys.stderr, flush=True)


def _end_reply(step: Command | Observation) -> None:
    if type(step) is ModelReplied or type(step) is ModelFailed:
        print(file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    """Run the loop once against the API; print the transcript. Exit 1 if the model failed."""
    sdk = _sdk_client(args.provider)
    wire = importlib.import_module(f"turnstile.providers.{PROVIDERS[args.provider][0]}")
    delta, step = (_print_delta, _end_reply) if args.stream else (None, None)
    client = wire.Client(sdk, model=args.model, stream=args.stream, on_delta=delta)
    spec = LoopSpec(system=args.system, max_tokens=args.max_tokens)
    run = sync.run(spec, args.prompt, model=client, on_step=step)
    print(transcript(run.state))
    return 1 if run.stop_reason is StopReason.model_error else 0


def _replay(args: argparse.Namespace) -> int:
    """Replay a trace; print the transcript. Exit 1, with the diff, if the run left the trace."""
    from turnstile.executors.testing import replay

    from .replay import ReplayMismatch, TraceError

    try:
        run = replay(args.trace)
    except OSError as err:
        raise ProviderUsageError(f"cannot read {args.trace}: {err.strerror}") from None
    except TraceError as err:
        raise ProviderUsageError(f"not a replayable trace: {err}") from None
    except ReplayMismatch as err:
        print(f"{args.trace}: the replay left the recording: {err}", file=sys.stderr)
        return 1
    print(transcript(run.state))
    return 0
