"""Which isolation layers this machine really enforces, found by running a probe call.

The probe goes through the same launcher, init and confinement as a real call, trying every
layer and reporting each; real calls then apply exactly the layers the probe found in force.
"""

from __future__ import annotations

__all__ = ["probe"]

import functools
import os

from turnstile.core import ToolSpec

from ._cgroup import where
from ._host import Launcher, exchange, host_sys_path
from ._layers import LAYERS, Layer
from ._limits import SandboxLimits
from ._seccomp import programs
from ._view import needed_paths
from ._wire import Call, Report, Tree
from ._workdir import home, remove, workdir

_PROBE_WALL_S = 60.0


@functools.cache
def probe(network: bool) -> dict[str, Layer]:
    """Every layer's status on this machine, for calls with or without network."""
    calls_home = home()
    # its home is a writable path too, so that its call binds a path into its root as a real
    # call's does, and keeps its tmpfs on top
    limits = SandboxLimits(network=network, writable_paths=(calls_home,))
    needed = needed_paths((), limits.writable_paths)
    filters = programs(network=limits.network)
    tree = Tree(LAYERS, needed, limits, calls_home, where(), filters)
    with workdir(os.geteuid() == 0, False) as (path, uid):
        call = Call(
            tool="",
            spec=ToolSpec("probe"),
            arguments={},
            workdir=path,
            uid=uid,
            limits=limits,
            layers=LAYERS,
            probe=True,
        )
        launcher = Launcher(host_sys_path())
        try:
            answer = exchange(launcher, tree, call, _PROBE_WALL_S)
        finally:
            launcher.close()
            remove(calls_home)
    if not isinstance(answer.result, Report):
        reason = answer.output.decode(errors="replace").strip()[-300:] or "no report"
        return {name: Layer(False, f"the sandbox's probe failed: {reason}") for name in LAYERS}
    found = answer.result.layers
    return {name: found.get(name, Layer(False, "not probed")) for name in LAYERS}
