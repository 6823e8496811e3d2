"""`Faults`: each kind weighted and switchable; a seed draws the same faults everywhere."""

from __future__ import annotations

import pytest
from turnstile.executors.testing import Fault, FaultKind, Faults
from turnstile.executors.testing._faults import Schedule


def test_each_kind_belongs_to_one_site() -> None:
    sites = {k: k.site for k in FaultKind}
    assert sites[FaultKind.tool_hang] == "tool" and sites[FaultKind.crash] == "write"
    assert sites[FaultKind.approval_denied] == "approval" and sites[FaultKind.reorder] == "round"


def test_chances_of_one_site_add_up_to_at_most_one() -> None:
    with pytest.raises(ValueError, match="tool faults"):
        Faults(tool_raise=0.6, tool_hang=0.6)
    with pytest.raises(ValueError, match="write faults"):
        Faults(crash=-0.1)


def test_only_switches_every_other_kind_off() -> None:
    only = Faults.only(crash=0.2)
    assert only.crash == 0.2 and only.tool_raise == 0 and only.reorder == 0
    schedule = Schedule(1, Faults.none())
    assert all(schedule.draw("tool")[0] is None for _ in range(100))


def test_a_seed_draws_the_same_faults_and_another_seed_others() -> None:
    def drawn(seed: int) -> list[Fault]:
        schedule = Schedule(seed, Faults(tool_raise=0.5))
        for _ in range(20):
            schedule.draw("tool")
        return schedule.struck

    assert drawn(3) == drawn(3) and drawn(3) != drawn(4)
