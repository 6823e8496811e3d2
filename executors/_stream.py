"""A run's `Update`s as an async iterator, the run going on in a task (`aio.updates`)."""

from __future__ import annotations

__all__ = ["Updates", "streamed"]

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

import anyio
from turnstile.core import LoopSpec
from turnstile.core.messages import Message

from ._agent import Agent
from ._events import Update
from ._run import Run


class Updates:
    """A run's updates as an async iterator (see `updates`); `run` is its `Run` once it is
    over."""

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.run: Run | None = None

    def __aiter__(self) -> Updates:
        return self

    async def __anext__(self) -> Update:
        try:
            return cast(Update, await self._receive.receive())
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


@contextlib.asynccontextmanager
async def streamed(
    run: Callable[..., Awaitable[Run]],
    spec: LoopSpec | Agent,
    prompt: str | Sequence[Message] | None,
    options: dict[str, Any],
) -> AsyncIterator[Updates]:
    """`aio.updates`: `run(spec, prompt, **options)` in a task, its `Update`s handed over."""
    send, receive = anyio.create_memory_object_stream[Update](math.inf)
    stream = Updates(receive)
    given = options.pop("on_update", None)

    def show(update: Update) -> None:
        if given is not None:
            given(update)
        with contextlib.suppress(anyio.BrokenResourceError):  # the block was left: no one reads
            send.send_nowait(update)

    failed: list[Exception] = []  # raised as they are once the run is over, never in a group

    async def drive() -> None:
        with send:
            try:
                stream.run = await run(spec, prompt, on_update=show, **options)
            except Exception as e:  # the iteration ends, then the block raises it
                failed.append(e)

    async with anyio.create_task_group() as group:
        group.start_soon(drive)
        with receive:
            try:
                yield stream
            except Exception as e:  # the block's own error: the run is cancelled first
                failed.insert(0, e)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]
