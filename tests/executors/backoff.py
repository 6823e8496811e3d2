"""A stand-in for the loop's backoff, so the executors' waiting can be tested on its own: every
retry's `CallModel` says "not before `wait` seconds after the failure"."""

from __future__ import annotations

import msgspec
import pytest
from turnstile.core import CallModel, Command, Loop, ModelFailed, Observation


def retries_wait(monkeypatch: pytest.MonkeyPatch, wait: float) -> None:
    send = Loop.send

    def send_with_backoff(self: Loop, obs: Observation) -> list[Command]:
        commands = send(self, obs)
        if type(obs) is not ModelFailed:
            return commands
        return [
            msgspec.structs.replace(c, not_before=obs.now + wait) if type(c) is CallModel else c
            for c in commands
        ]

    monkeypatch.setattr(Loop, "send", send_with_backoff)
