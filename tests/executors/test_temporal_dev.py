"""`temporal.dev_server`: the command it starts the development server with."""

from __future__ import annotations

import pytest

pytest.importorskip("temporalio", reason="needs temporalio: pip install 'turnstile[temporal]'")


def test_the_dev_server_reads_its_transfer_queue_as_fast_as_tasks_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its one history shard would hand each workflow task on after an activity no sooner than
    its transfer queue's poll rate allows (20 a second by default): the server is started with
    a rate no run reaches."""
    from turnstile.executors.temporal import _dev

    started: list[list[str]] = []

    def popen(args: list[str], **_: object) -> None:
        started.append(args)
        raise OSError("not started")

    monkeypatch.setattr(_dev, "temporal_binary", lambda: "temporal")
    monkeypatch.setattr(_dev.subprocess, "Popen", popen)
    with pytest.raises(OSError, match="not started"), _dev.dev_server():
        pass
    [args] = started
    config = [args[i + 1] for i, arg in enumerate(args) if arg == "--dynamic-config-value"]
    assert config == ["history.transferProcessorMaxPollRPS=1000"]
