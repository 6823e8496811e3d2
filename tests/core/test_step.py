"""Deciding writes nothing: the state changes only where an observation is recorded and where
`Step.apply` acts on a decision, and `apply` makes every command the loop sends."""

from __future__ import annotations

import ast
import pathlib

import turnstile.core

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
