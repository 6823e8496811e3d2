"""What executors need from a model client and a tool runner: two small protocols."""

from __future__ import annotations

__all__ = ["AsyncModelClient", "ModelClient", "ToolRunner"]

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from turnstile.core import ModelRequest, ModelResponse, ToolOutcome, ToolSpec


@runtime_checkable
class ModelClient(Protocol):
    """Answers one request, or raises `turnstile.core.ModelError` (retryable or not)."""

    def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class AsyncModelClient(Protocol):
    async def acomplete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class ToolRunner(Protocol):
    """Runs one call by name; every failure comes back as an `is_error` outcome, not raised.
    `specs` describe the tools it runs (a loop spec without tools gets them). A `run` that also
    takes a `context` keyword gets the call's `ToolContext` (its id), for the tools that ask for
    it; a runner written without one still works."""

    @property
    def specs(self) -> Sequence[ToolSpec]: ...

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...
