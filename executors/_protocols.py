"""What executors need from a model client and a tool runner: two small protocols."""

from __future__ import annotations

__all__ = ["AsyncModelClient", "ModelClient", "ToolRunner", "takes"]

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from turnstile.core import ModelRequest, ToolOutcome, ToolSpec
from turnstile.core.messages import ModelResponse
from turnstile.providers.client import takes


@runtime_checkable
class ModelClient(Protocol):
    """Answers one request, or raises `turnstile.core.ModelError` (retryable or not). A
    `complete` (or `acomplete`) that also takes an `on_delta` keyword gets a callback for the
    deltas of a streamed reply, which the run hands its caller (`on_update`) as they arrive."""

    def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class AsyncModelClient(Protocol):
    async def acomplete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class ToolRunner(Protocol):
    """Runs one call by name; every failure comes back as an `is_error` outcome, not raised.
    `specs` describe the tools it runs (a loop spec without tools gets them). A `run` that also
    takes a `context` keyword gets the call's `ToolContext` (its id and the run's `deps`), for
    the tools that ask for it; a runner written without one still works. A runner with a
    `check_deps(deps)` method is asked, before the run starts, whether it can take the run's
    deps (a sandbox cannot send every object to its processes), and raises if not."""

    @property
    def specs(self) -> Sequence[ToolSpec]: ...

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome: ...
