"""The sandbox's isolation layers: their names, how one is reported, and refusing to run less
isolated than a user required."""

from __future__ import annotations

__all__ = ["LAYERS", "Layer", "SandboxUnavailable", "check_required"]

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


class Layer(msgspec.Struct, frozen=True):
    """Whether a layer is in force on this machine; `detail` says what it enforces, or why not."""

    in_force: bool
    detail: str


class SandboxUnavailable(TurnstileError):
    """A required isolation layer cannot be enforced here; nothing ran less isolated."""

    def __init__(self, layer: str, reason: str) -> None:
        self.layer = layer
        self.reason = reason
        super().__init__(f"the sandbox cannot enforce {layer!r} here: {reason}")


def check_required(required: Iterable[str], layers: Mapping[str, Layer]) -> None:
    """Raise `SandboxUnavailable` for the first required layer not in force."""
    for name in required:
        if name not in LAYERS:
            raise ValueError(f"unknown sandbox layer {name!r}; the layers are {', '.join(LAYERS)}")
        layer = layers[name]
        if not layer.in_force:
            raise SandboxUnavailable(name, layer.detail)
