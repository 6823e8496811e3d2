"""`ScriptedModel`: a model client that answers from a script, for tests and the demo."""

from __future__ import annotations

__all__ = ["ScriptedModel"]

from collections.abc import Callable, Sequence

from turnstile.core import ModelError, ModelRequest, ModelResponse


class ScriptedModel:
    """Replies with the next item of `script` (a `ModelError` in it is raised instead), or with
    `script(request)` when given a function. Every request is kept in `requests`."""

    def __init__(
        self,
        script: Sequence[ModelResponse | ModelError] | Callable[[ModelRequest], ModelResponse],
    ) -> None:
        self._script = script
        self._next = 0
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if callable(self._script):
            return self._script(request)
        if self._next >= len(self._script):
            raise ModelError(f"the script has no reply left after {self._next}", retryable=False)
        item = self._script[self._next]
        self._next += 1
        if isinstance(item, ModelError):
            raise item
        return item

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        return self.complete(request)
