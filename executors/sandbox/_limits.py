"""`SandboxLimits`: what one sandboxed tool call may use, strict unless loosened."""

from __future__ import annotations

__all__ = ["MiB", "SandboxLimits", "size"]

import msgspec

MiB = 1024 * 1024


def size(n: int) -> str:
    """A byte count as people write it: "512 MiB", "1 MiB", "300 KiB", "17 bytes"."""
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


class SandboxLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits of one call. A tool's own `ToolSpec.timeout_s` replaces `wall_s` for its calls.

    `memory_bytes` caps the address space of each process, `cpu_s` its CPU time, and both
    the call's processes together where the call has a cgroup (its memory then counts shared
    memory and its work dir's files too). `output_bytes` caps what the call writes to
    stdout/stderr, and separately the size of its result. `file_bytes` caps any one file
    written; `open_files` the descriptors of each process; `processes` the processes and
    threads of the call together (enforced with a cgroup, or a uid of the call's own). Each
    call may write in a fresh work dir (its cwd, HOME and TMPDIR, gone afterwards) of at most
    `disk_bytes` and one file per 4 KiB of it (where the sandbox can give it a tmpfs of its
    own), and in `writable_paths`, which the call's user must be allowed to write by their
    permissions too.
    """

    memory_bytes: int = 512 * MiB
    cpu_s: int = 10
    wall_s: float = 30.0
    output_bytes: int = 1 * MiB
    file_bytes: int = 16 * MiB
    disk_bytes: int = 64 * MiB
    open_files: int = 64
    processes: int = 16
    network: bool = False
    writable_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpu_s", "wall_s", "output_bytes", "file_bytes", "disk_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        if self.open_files < 8:
            raise ValueError("SandboxLimits.open_files must be at least 8 (the interpreter's own)")
        if self.processes < 1:
            raise ValueError("SandboxLimits.processes must be at least 1")
