"""The phase table: one place, drawn as Mermaid, every phase reachable and accepted."""

from __future__ import annotations

from turnstile.core import mermaid
from turnstile.core._machine import ACCEPTS, NEXT, PHASES


def test_every_phase_has_an_entry_in_both_tables() -> None:
    assert set(ACCEPTS) == set(PHASES)
    assert {src for src, _ in NEXT} | {dst for dst in NEXT.values()} == set(PHASES)
    assert ACCEPTS["done"] == frozenset()
    assert all(NEXT[(p, "finish")] == "done" for p in PHASES if p != "done")


def test_the_diagram_is_drawn_from_the_table(snapshot) -> None:
    assert mermaid() == snapshot
