"""Deciding writes nothing: the state changes only where an observation is recorded, where a
plan's `_record` writer runs, and where `Step.apply` acts on a decision; `apply` makes every
command the loop sends."""

from __future__ import annotations

import ast
import contextlib
import pathlib
from collections.abc import Callable
from typing import Any
from unittest import mock

import turnstile.core
from hypothesis import given, settings
from hypothesis import strategies as st
from turnstile.core import LoopSpec
from turnstile.core._state import dump_state
from turnstile.core._step import Step

from tests.core._scripts import Run, drive, specs

_COMMANDS = {"CallModel", "RunTool", "AwaitApproval", "Finish"}
_MUTATORS = {"append", "extend", "update", "insert", "pop", "clear", "remove"}


def _functions() -> dict[str, ast.FunctionDef]:
    """Every function of the core's modules, as `module:Class.function`."""
    found: dict[str, ast.FunctionDef] = {}
    for path in pathlib.Path(turnstile.core.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for holder in [tree, *(n for n in tree.body if isinstance(n, ast.ClassDef))]:
            prefix = f"{holder.name}." if isinstance(holder, ast.ClassDef) else ""
            for fn in holder.body:
                if isinstance(fn, ast.FunctionDef):
                    found[f"{path.stem}:{prefix}{fn.name}"] = fn
    return found


def _writes_state(fn: ast.FunctionDef) -> bool:
    """Whether `fn` assigns to, deletes from or appends to a field of a state (`st`, `state`)."""

    def of_state(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute | ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id in ("st", "state"):
                return isinstance(node, ast.Attribute)
            node = node.value
        return False

    for node in ast.walk(fn):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if of_state(t):
                    return True
    return False


def test_only_recording_and_apply_write_the_state() -> None:
    writers = {name for name, fn in _functions().items() if _writes_state(fn)}
    assert writers, "the check finds no writer at all: it is broken"
    outside = {
        name
        for name in writers
        if not name.startswith("_record:")
        and name not in {"_step:Step.apply", "_state:new_run", "_state:load_state"}
    }
    assert not outside, f"these write the state without recording or applying: {outside}"
    assert "_step:Step.apply" in writers


def test_apply_makes_every_command_the_loop_sends() -> None:
    makers = {
        name
        for name, fn in _functions().items()
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _COMMANDS
    }
    # `outstanding` hands out again, unchanged, what `apply` sent (after a load or a replay)
    assert makers == {"_step:Step.apply", "_step:Step.outstanding"}


_DECIDERS = (
    *("decide", "_replied", "_start_round", "_dispatch", "_round_complete", "_written"),
    *("_failed", "_resumed", "_next_turn", "_compacted", "_stop"),
)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), spec=specs())
def test_deciding_writes_nothing_in_any_world(data: st.DataObject, spec: LoopSpec) -> None:
    """Every deciding method leaves the state as it found it, byte for byte: what a step writes
    it writes through a `_record` writer its plan names, or in `apply`."""
    calls: list[str] = []

    def pure(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def deciding(self: Step, *args: Any) -> Any:
            before = dump_state(self.state)
            plan = method(self, *args)
            assert dump_state(self.state) == before, f"Step.{name} wrote to the state"
            calls.append(name)
            return plan

        return deciding

    with contextlib.ExitStack() as stack:
        for name in _DECIDERS:
            stack.enter_context(mock.patch.object(Step, name, pure(name, getattr(Step, name))))
        drive(data, Run(spec)).check_finished()
    assert "decide" in calls
