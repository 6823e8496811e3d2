"""Launchers ready for calls: a warm pool reuses them, a cold sandbox starts one per call."""

from __future__ import annotations

__all__ = ["Pool"]

import threading

from ._host import Launcher
from ._wire import Prepare


class Pool:
    """Keeps up to `warm` idle launchers, started ahead of need, each keeping its next call's
    process tree ready (`prepare`). A call takes an idle one, or starts a new one; afterwards
    a healthy launcher goes back if there is room, else it is told to go. With `warm=0` every
    call has a fresh launcher (and interpreter) of its own. A launcher told to go tears its
    tree down (the call's namespaces, its cgroup) after the call's answer, off its way: `close`
    waits for every one of them."""

    def __init__(self, sys_path: tuple[str, ...], warm: int, prepare: Prepare) -> None:
        if warm < 0:
            raise ValueError("warm must be 0 (cold) or a number of launchers to keep")
        self._sys_path = sys_path
        self._warm = warm
        self._prepare = prepare if warm else None
        self._lock = threading.Lock()
        self._closed = False
        self._idle = [Launcher(sys_path, self._prepare) for _ in range(warm)]
        self._going: list[threading.Thread] = []

    def acquire(self) -> Launcher:
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox is closed")
            while self._idle:
                launcher = self._idle.pop(0)  # idle longest: likeliest to have its tree ready
                if launcher.process.poll() is None:
                    return launcher
                launcher.kill()  # died while idle (killed from outside): reap it
        return Launcher(self._sys_path, self._prepare)

    def release(self, launcher: Launcher, healthy: bool) -> None:
        with self._lock:
            if healthy and not self._closed and len(self._idle) < self._warm:
                self._idle.append(launcher)
                return
            if healthy:  # it goes on its own; reaped here (the wait is a thread's)
                launcher.hang_up()
                going = threading.Thread(target=launcher.close, name="turnstile-sandbox-going")
                self._going = [*(g for g in self._going if g.is_alive()), going]
                going.start()
                return
        launcher.kill()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            going, self._going = self._going, []
        for launcher in idle:
            launcher.close()
        for thread in going:
            thread.join()
