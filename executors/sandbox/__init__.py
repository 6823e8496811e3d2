"""`Sandbox`: run each tool call in a fresh, confined process tree.

    from turnstile.executors import sync
    from turnstile.executors.sandbox import Sandbox, SandboxLimits

    with Sandbox([get_weather, "mytools.files:read_file"], SandboxLimits(wall_s=10)) as box:
        result = sync.run(spec, prompt, model=client, tools=box)

A `Sandbox` is a tool runner like `Toolbox`: `run(name, arguments)` returns a `ToolOutcome`
and never raises for anything a tool does. The call's process imports the tool by path, checks
the arguments and calls it with `invoke`, exactly as in-process; a crash, hang, flood of
output or escape attempt ends as an `is_error` outcome naming the limit, and every process the
call started is gone when `run` returns.

A sandbox applies the layers of its tier (`TIERS`: `full` unless another is chosen), and
`require=` adds layers; where one is missing here it raises `SandboxUnavailable` naming each,
and never runs with fewer. `available_layers()` and `available_tiers()` say what this machine
can give, `Sandbox.layers` what a sandbox uses.
"""

from __future__ import annotations

__all__ = [
    "ALWAYS_REQUIRED",
    "DEFAULT_LIMITS",
    "LAYERS",
    "TIERS",
    "Egress",
    "Layer",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "Secret",
    "Tier",
    "UnsendableDeps",
    "Workspace",
    "available_layers",
    "available_tiers",
]

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any

from turnstile.core import Event, Tool, ToolContext, ToolOutcome, ToolSpec

from ._cgroup import where
from ._egress import Egress, Proxy, Secret
from ._host import exchange, host_sys_path
from ._layers import LAYERS, TIERS, Layer, SandboxUnavailable, Tier, missing, tier_of
from ._limits import SandboxLimits
from ._pool import Pool
from ._probe import probe
from ._refs import ToolRef, reference
from ._seccomp import programs
from ._view import needed_paths
from ._wire import Call, Prepare, Tree, UnsendableDeps, encode_deps
from ._workdir import home, remove, workdir
from ._workspace import Workspace, kept

ALWAYS_REQUIRED = ("scrubbed_env", "rlimits")
"""Layers every sandbox needs: without them (a failed probe, say) none is built."""

DEFAULT_LIMITS = SandboxLimits()
"""The limits a `Sandbox` applies unless given others: strict ones."""


def available_layers() -> Mapping[str, Layer]:
    """Each isolation layer and whether this machine enforces it (or why not). Found once per
    process by a probe call, which takes a moment."""
    return MappingProxyType(probe(False))


def available_tiers() -> Mapping[str, Tier]:
    """Each tier (`TIERS`, strongest first) and whether this machine can give it to calls
    without network: each of its layers missing here, with why."""
    layers = probe(False)
    return MappingProxyType({name: Tier(t, missing(t, layers)) for name, t in TIERS.items()})


def _layers_for(limits: SandboxLimits) -> dict[str, Layer]:
    layers = dict(probe(limits.network))
    if limits.network:
        layers["network_namespace"] = Layer(False, "not used: the limits allow network")
    return layers


def _order(name: str) -> int:
    return LAYERS.index(name) if name in LAYERS else len(LAYERS)


class Sandbox:
    """Runs `tools` one confined process tree per call, within `limits`. A tool is a `Tool` or
    a function (wrapped with `@tool`) defined at a module's top level, or a path string
    "package.module:function"; the call's process imports it by that path.

    `tier` names the layers its calls get (see `TIERS`); the default is the strongest, and a
    weaker one is chosen by name. `require` adds layers (see `LAYERS`). Where any of them is
    missing here, `SandboxUnavailable` is raised, naming each and why: a sandbox never runs
    its calls with fewer layers than its policy, nor with layers it leaves out. `warm` keeps
    that many launchers started, each with its next call's process tree made ahead, so a call
    costs neither an interpreter start nor forks; `close()` (or leaving a `with` block) stops
    them. Thread-safe.

    A tool's `ToolContext` crosses to its process: the call's id, and of the run's `deps` what
    `deps` picks (`deps=lambda d: d` for all of them; none unless given, for the code in here
    is untrusted and a run's deps hold handles and secrets), which must be plain data msgpack
    can carry; the tool gets it as the type its `ToolContext[T]` says. A run whose picked deps
    cannot cross is refused before it starts (`UnsendableDeps`).

    `egress` names the hosts the calls may reach over HTTP, each with its `Egress` route,
    through a proxy of the sandbox's on the host (their only network); `secrets` reach the
    calls as placeholders in their environment (each under its name), which the proxy fills in
    only in requests to the host a `Secret` is bound to. See `_egress`.

    With a `workspace`, each run's calls share a work dir of the run's own that lasts the run,
    snapshotted after each call (see `Workspace`); without one, each call's is fresh and empty.
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any] | str],
        limits: SandboxLimits = DEFAULT_LIMITS,
        *,
        tier: str = "full",
        require: Iterable[str] = (),
        warm: int = 0,
        deps: Callable[[Any], Any] | None = None,
        secrets: Mapping[str, Secret] | None = None,
        egress: Mapping[str, Egress] | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self.limits = limits
        self.workspace = workspace
        self._pick = deps
        self._sent: tuple[Any, bytes | None] = (None, None)  # the last deps, encoded
        self._tools: dict[str, ToolRef] = {}
        for given in tools:
            ref = reference(given)
            if ref.spec.name in self._tools:
                raise ValueError(f"two tools are named {ref.spec.name!r}")
            self._tools[ref.spec.name] = ref
        layers = _layers_for(limits)
        policy = [n for n in tier_of(tier) if not (limits.network and n == "network_namespace")]
        wanted = {*ALWAYS_REQUIRED, *policy, *require}
        gone = missing(sorted(wanted, key=_order), layers)
        if gone:
            raise SandboxUnavailable(tier, gone)
        self.tier = tier
        self._applied = tuple(name for name in LAYERS if name in wanted)
        if "landlock" in wanted and "private_root" not in wanted:
            reads = f"{layers['landlock'].detail}; reads only what a root of its own would hold"
            layers["landlock"] = Layer(True, reads)
        left_out = Layer(False, f"not in tier {tier!r}")
        self.layers: Mapping[str, Layer] = MappingProxyType(
            {n: layers[n] if n in wanted or not layers[n].in_force else left_out for n in LAYERS}
        )
        self._sys_path = host_sys_path()
        modules = [ref.path.partition(":")[0] for ref in self._tools.values()]
        tls_files = limits.network or bool(secrets or egress)  # clients load them, as with TLS
        needed = needed_paths(modules, limits.writable_paths, network=tls_files)
        calls_home = home() if "workdir_tmpfs" in self._applied else None
        filters = programs(network=limits.network)
        self._proxy = None
        if secrets or egress:
            if limits.network:
                raise ValueError("egress and secrets are for calls without network")
            self._proxy = Proxy(egress or {}, secrets or {})
            weakref.finalize(self, self._proxy.close)
        proxy, own = self._proxy.path if self._proxy else "", workspace is not None
        self._tree = Tree(self._applied, needed, limits, calls_home, where(), filters, proxy, own)
        self._removes_home = weakref.finalize(self, remove, calls_home) if calls_home else None
        self._pool = Pool(self._sys_path, warm, Prepare(self._tree))

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ref.spec for ref in self._tools.values())

    def check_deps(self, deps: Any) -> None:
        """Raise `UnsendableDeps` unless (what `deps=` picks of) `deps` can cross to the calls'
        processes; the executors ask before a run starts. Encoded afresh: the same object given
        to another run may have changed since."""
        self._sent = (None, None)
        self._encoded(deps)

    def _encoded(self, deps: Any) -> bytes | None:
        """What of `deps` crosses, encoded once per run (a run's deps stay the same object)."""
        if deps is None or self._pick is None:
            return None
        last, raw = self._sent
        if last is not deps:
            raw = encode_deps(self._pick(deps))
            self._sent = (deps, raw)
        return raw

    def run(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        context: ToolContext | None = None,
        history: Sequence[Event] | None = None,
    ) -> ToolOutcome:
        """Run one call in a fresh confined process; every failure is an `is_error` outcome.
        `context` (the call's id, and what crosses of its deps) goes to the tool that asks for
        it; nothing else does. `history`, the run's events so far (`sync` and `aio` give it),
        says which run's workspace the call works in, and in what state."""
        ref = self._tools.get(name)
        if ref is None:
            return ToolOutcome(f"tool {name!r} has no implementation in this run", True)
        wall_s = ref.spec.timeout_s or self.limits.wall_s
        try:
            on_host = self._tree.home is None and self.workspace is None
            with (
                workdir("separate_uid" in self._applied, on_host) as (path, uid),
                kept(self.workspace, history, context, self.limits, uid) as workspace,
            ):
                call = Call(
                    tool=ref.path,
                    spec=ref.spec,
                    arguments=arguments,
                    call_id=None if context is None else context.call_id,
                    deps=None if context is None else self._encoded(context.deps),
                    workdir=workspace.path or path,
                    uid=uid,
                    limits=self.limits,
                    layers=self._applied,
                    egress=self._proxy.path if self._proxy else "",
                    env=self._proxy.env if self._proxy else {},
                )
                launcher = self._pool.acquire()
                healthy = False
                try:
                    answer = exchange(launcher, self._tree, call, wall_s)
                    healthy = answer.healthy
                finally:
                    self._pool.release(launcher, healthy)
                return workspace.snapshot(answer.outcome(name, self.limits, wall_s))
        except Exception as e:  # the sandbox's own failure must not end the run
            return ToolOutcome(f"the sandbox failed to run {name}: {type(e).__name__}: {e}", True)

    def close(self) -> None:
        """Stop the warm launchers, and wait for those of answered calls to be gone; calls
        after this fail."""
        self._pool.close()
        if self._proxy is not None:
            self._proxy.close()
        if self._removes_home is not None:
            self._removes_home()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def __dir__() -> list[str]:
    """The public names (`__all__`), without the imports this module works with."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("_"))})
