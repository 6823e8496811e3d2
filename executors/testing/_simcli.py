"""`turnstile simulate module:agent --seeds 1000`: the command line's face of `simulate`."""

from __future__ import annotations

__all__ = ["add_simulate", "options_of", "resolve"]

import argparse
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from turnstile.executors._agent import Agent

from ._faults import FaultKind, Faults
from ._simulate import simulate


def resolve(target: str, where: Path | None = None) -> Any:
    """The object at "module:name", the module looked for in `where` (default: the current
    folder, as `python -m` does) too."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"{target!r} is not module:name")
    folder = str(where if where is not None else os.getcwd())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return getattr(importlib.import_module(module), name)


def options_of(found: object, target: str) -> dict[str, Any]:
    """`simulate`'s arguments from what a target names: an `Agent` (the prompt then comes from
    elsewhere), or a mapping of `simulate`'s keyword arguments (its `spec` an `Agent` too)."""
    if isinstance(found, Agent):
        return {"spec": found}
    if isinstance(found, Mapping) and "spec" in found:
        return dict(found)
    raise TypeError(
        f"{target} is neither an Agent nor a mapping of simulate()'s arguments with a spec"
    )


def _simulate(args: argparse.Namespace) -> int:
    try:
        options = options_of(resolve(args.target), args.target)
    except (ImportError, AttributeError, ValueError, TypeError) as e:
        print(f"turnstile: cannot simulate {args.target}: {e}", file=sys.stderr)
        return 2
    if args.prompt is not None:
        options["prompt"] = args.prompt
    if args.no_faults:
        options["faults"] = Faults.none()
    elif args.only:
        try:
            kinds = [FaultKind(k.strip()) for k in args.only.split(",")]
        except ValueError as e:
            print(f"turnstile: {e}; the kinds: {', '.join(FaultKind)}", file=sys.stderr)
            return 2
        given = options.get("faults") or Faults()
        options["faults"] = Faults.only(**{k.value: getattr(given, k.value) for k in kinds})
    if "prompt" not in options:
        print(f"turnstile: {args.target} needs a prompt: give one after it", file=sys.stderr)
        return 2
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    spec = options.pop("spec")
    if args.live:
        options["live"] = True
    try:
        report = simulate(
            spec, seeds=seeds, keep_going=args.keep_going, target=args.target, **options
        )
    except TypeError as e:
        print(f"turnstile: cannot simulate {args.target}: {e}", file=sys.stderr)
        return 2
    print(report)
    folder = Path(args.regressions)
    for v in report.violations:
        name = args.target.replace(":", "_").replace(".", "_")
        path = v.save(folder / f"test_{name}_seed{v.seed}.simulation.json")
        print(f"\nkept as {path} (pytest replays it as a test)")
    return 0 if report.ok else 1


def add_simulate(sub: Any) -> None:
    """Register `turnstile simulate` on the command line's subcommands."""
    sim = sub.add_parser(
        "simulate",
        help="run an agent under seeded worlds of faults, checking its promises at every step",
        description="turnstile simulate module:agent [PROMPT] --seeds 1000",
    )
    sim.add_argument(
        "target",
        metavar="AGENT",
        help="where the Agent, or a dict of simulate()'s arguments, lives: module:attribute",
    )
    sim.add_argument("prompt", nargs="?", help="the prompt (else the dict's)")
    sim.add_argument("--seeds", type=int, default=100, metavar="N", help="how many (default 100)")
    sim.add_argument("--first-seed", type=int, default=0, metavar="N", help="from (default 0)")
    sim.add_argument("--no-faults", action="store_true", help="no fault: the scheduler alone")
    sim.add_argument(
        "--only",
        metavar="KIND,...",
        help="only these faults (crash,tool_hang...), at their weights",
    )
    sim.add_argument(
        "--keep-going", action="store_true", help="run every seed, past the first violation"
    )
    sim.add_argument(
        "--live", action="store_true", help="an agent's model string is called, live (costs)"
    )
    sim.add_argument(
        "--regressions",
        default=".",
        metavar="DIR",
        help="where each violation is kept as a *.simulation.json test (default: here)",
    )
    sim.set_defaults(fn=_simulate)
