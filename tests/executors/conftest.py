"""The executors' tests: slow ones run only when asked for with `-m slow`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run it with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
