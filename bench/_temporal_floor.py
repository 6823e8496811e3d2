"""Temporal's floor for `bench.temporal`: an empty workflow stepping through empty activities
(a module of its own: the workflow sandbox imports it, and it needs temporalio)."""

from __future__ import annotations

__all__ = ["Floor", "empty"]

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench.empty")
async def empty(data: bytes) -> bytes:
    """Nothing: the floor's activity."""
    return data


@workflow.defn(name="bench.floor")
class Floor:
    """`steps` empty activities one after the other (local ones if `local`): the least a step
    through the server can cost, each a workflow task and an activity, as a turn's two are."""

    @workflow.run
    async def run(self, steps: int, local: bool) -> int:
        timeout = timedelta(seconds=30)
        for _ in range(steps):
            if local:
                await workflow.execute_local_activity(empty, b"", start_to_close_timeout=timeout)
            else:
                await workflow.execute_activity(empty, b"", start_to_close_timeout=timeout)
        return steps
