"""`WireClient`, the base of every format's `Client`: what an executor or a test kit may hold
without knowing the format."""

from __future__ import annotations

__all__ = ["WireClient", "takes"]

from ._client import WireClient as WireClient
from ._client import takes as takes
