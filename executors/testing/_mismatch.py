"""`TraceMismatchFailure`, apart from the trace files so the plugin can name it without loading
the SDKs."""

from __future__ import annotations

__all__ = ["TraceMismatchFailure"]

import pytest


class TraceMismatchFailure(pytest.fail.Exception):  # type: ignore[name-defined]
    """Fails a test where it sends a request its trace did not record. A `BaseException`, like
    every pytest outcome: neither the SDKs nor the executors catch it, so the test cannot go on
    with a failed model call instead."""
