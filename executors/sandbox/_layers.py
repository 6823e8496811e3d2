"""The sandbox's isolation layers and tiers: their names, how one is reported, and refusing to
run less isolated than a sandbox's policy requires."""

from __future__ import annotations

__all__ = ["LAYERS", "TIERS", "Layer", "SandboxUnavailable", "Tier", "missing", "tier_of"]

from collections.abc import Iterable, Mapping

import msgspec
from turnstile.core._errors import TurnstileError

LAYERS: tuple[str, ...] = (
    "session",
    "subreaper",
    "pid_namespace",
    "mount_namespace",
    "private_locks",
    "workdir_tmpfs",
    "cgroup",
    "network_namespace",
    "ipc_namespace",
    "private_root",
    "socket_families",
    "scrubbed_env",
    "rlimits",
    "no_new_privs",
    "landlock",
    "separate_uid",
    "seccomp",
)
"""Every layer, in the order a call applies them."""

_NEED_ROOT = ("cgroup", "separate_uid")
_NAMESPACES = (
    "pid_namespace",
    "mount_namespace",
    "private_locks",
    "workdir_tmpfs",
    "network_namespace",
    "ipc_namespace",
    "private_root",
)

TIERS: Mapping[str, tuple[str, ...]] = {
    "full": LAYERS,
    "unprivileged": tuple(name for name in LAYERS if name not in _NEED_ROOT),
    "landlock": tuple(name for name in LAYERS if name not in (*_NEED_ROOT, *_NAMESPACES)),
}
"""Each tier, strongest first, and the layers a sandbox of it applies: `full` every one (root);
`unprivileged` all but a cgroup and a uid per call (namespaces made in a user namespace where
not root); `landlock` none of the namespaces either (for hosts without user namespaces)."""


class Layer(msgspec.Struct, frozen=True):
    """Whether a layer is in force on this machine; `detail` says what it enforces, or why not."""

    in_force: bool
    detail: str


class Tier(msgspec.Struct, frozen=True):
    """Whether this machine can give a tier: its `layers`, and each of them `missing` here with
    the reason (none if it can)."""

    layers: tuple[str, ...]
    missing: dict[str, str]

    @property
    def available(self) -> bool:
        return not self.missing


class SandboxUnavailable(TurnstileError):
    """Layers a sandbox's policy requires cannot be enforced here (`missing`: each layer and
    why); no sandbox was built, nothing ran less isolated."""

    def __init__(self, tier: str, missing: Mapping[str, str]) -> None:
        self.tier = tier
        self.missing = dict(missing)
        reasons = "; ".join(f"{name}: {why}" for name, why in self.missing.items())
        names = ", ".join(self.missing)
        super().__init__(
            f"the sandbox cannot give tier {tier!r} here, missing {names} ({reasons}); "
            "choose a weaker tier explicitly (see available_tiers()) or run where it holds"
        )


def tier_of(name: str) -> tuple[str, ...]:
    """The layers of tier `name`; `ValueError` for a tier that is not one."""
    if name not in TIERS:
        raise ValueError(f"unknown sandbox tier {name!r}; the tiers are {', '.join(TIERS)}")
    return TIERS[name]


def missing(required: Iterable[str], layers: Mapping[str, Layer]) -> dict[str, str]:
    """Each of the `required` layers not in force in `layers`, with why; `ValueError` for a
    name that is no layer."""
    gone: dict[str, str] = {}
    for name in required:
        if name not in LAYERS:
            raise ValueError(f"unknown sandbox layer {name!r}; the layers are {', '.join(LAYERS)}")
        if not layers[name].in_force:
            gone[name] = layers[name].detail
    return gone
