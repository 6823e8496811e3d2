"""`ScriptedModel`: a model client that answers from a script, for tests and the demo."""

from __future__ import annotations

__all__ = ["ScriptedModel"]

from collections.abc import Callable, Sequence

from turnstile.core import ModelError, ModelRequest
from turnstile.core.messages import ModelResponse, Text
from turnstile.providers import Delta, TextDelta

from ._protocols import takes


class ScriptedModel:
    """Replies with the next item of `script` (a `ModelError` in it is raised instead), or with
    `script(request)` when given a function. Every request is kept in `requests`. Given an
    `on_delta`, it streams each text part of the reply as one `TextDelta` first."""

    def __init__(
        self,
        script: Sequence[ModelResponse | ModelError] | Callable[[ModelRequest], ModelResponse],
    ) -> None:
        self._script = script
        self._next = 0
        self.requests: list[ModelRequest] = []

    def complete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        reply = self._reply(request)
        if on_delta is not None:
            for index, part in enumerate(reply.content):
                if type(part) is Text:
                    on_delta(TextDelta(index, part.text))
        return reply

    async def acomplete(
        self, request: ModelRequest, *, on_delta: Callable[[Delta], object] | None = None
    ) -> ModelResponse:
        if on_delta is None or not takes(self.complete, "on_delta"):
            return self.complete(request)  # a `complete` of its own, written without deltas
        return self.complete(request, on_delta=on_delta)

    def _reply(self, request: ModelRequest) -> ModelResponse:
        if callable(self._script):
            return self._script(request)
        if self._next >= len(self._script):
            raise ModelError(f"the script has no reply left after {self._next}", retryable=False)
        item = self._script[self._next]
        self._next += 1
        if isinstance(item, ModelError):
            raise item
        return item
