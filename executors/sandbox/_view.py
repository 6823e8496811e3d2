"""The call's view of the filesystem: a root of its own, holding only what the call needs.

As with bubblewrap's `--ro-bind`, the call's mount namespace gets a fresh root (a small tmpfs)
into which the host paths it needs are bound read-only: the system's programs and libraries
(/usr), the interpreter's prefixes (its standard library, the installed packages), a few files
of /etc, and, of the other `sys.path` entries (a project's own directories, such as the cwd),
only the packages of the tools and of turnstile. Besides: a /dev with null, zero, random and
urandom, a private /dev/shm, an empty /tmp. Then the namespace pivots to it and drops the old
root: nothing else of the host is there, not even hidden.

Where it can, it shows the host's files through inodes of the call's own (overlays, copies; see
`_Own`) rather than binds of the host's: every file lock (flock, POSIX, OFD, lease) hangs off an
inode, so none a call takes on them reaches the host's files.

A call's process tree builds its root ahead of the call (`reveal`), and there the call's own
work dir where it has a tmpfs of its own (see `_disk`); a work dir made on the host and the
writable paths are bound in read-write when the call comes (`show`).
"""

from __future__ import annotations

__all__ = [
    "interpreter_paths",
    "make_room",
    "needed_paths",
    "own_mounts",
    "private_ipc",
    "reveal",
    "show",
    "unreadable",
]

import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator

from ._layers import Layer
from ._linux import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    attach,
    bind,
    clone_mount,
    clone_tree,
    detach,
    mount_mqueue,
    mount_overlay,
    mount_proc,
    mount_tmpfs,
    pivot_root_here,
    read_only,
    unshare,
)

# the system's programs and libraries, and the dynamic loader's cache of where they are
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache")
_ETC = ("/etc/localtime",)
_NETWORK_ETC = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
)
_DEVICES = ("null", "zero", "random", "urandom")
_BUILD_AT = "/proc"
"""Where the root is built before the pivot: a directory no needed path is below."""
_SCRATCH = "/.own"
"""Where in the root being built `_Own` keeps what it is made of, until the pivot."""


def interpreter_paths() -> list[str]:
    """What any call needs: the interpreter's binary directory and its standard library."""
    return [os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(os.__file__)]


def _installed() -> list[str]:
    """Where installed code lives, bound whole: the interpreter's prefixes and site dirs."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    sites = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    return [*interpreter_paths(), *prefixes, *sites]


def _packages(modules: Iterable[str]) -> Iterator[str]:
    """The directories of each module's packages (each one on the way down: an editable install
    may map a subpackage elsewhere), or a top-level module's own file."""
    for name in modules:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            module = sys.modules.get(".".join(parts[:depth]))
            found = list(getattr(module, "__path__", None) or [])
            file = getattr(module, "__file__", None)
            if not found and depth == 1 and file:
                found = [file]
            yield from (path for path in found if os.path.exists(path))


def _links_out(directory: str) -> Iterator[str]:
    """Where the symlinks below `directory` lead outside it (an editable install is a tree of
    links): the target's package directory, or the target file alone."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                package = real if os.path.isdir(real) else os.path.dirname(real)
                if real.startswith(directory.rstrip("/") + "/"):
                    continue
                init = os.path.join(package, "__init__.py")
                yield package if os.path.exists(init) else real
            elif entry.is_dir():
                yield from _links_out(entry.path)


def _outside(path: str, tops: Iterable[str]) -> bool:
    return not any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if _outside(path, kept):
            kept.append(path)
    return kept


def _resolve(path: str, links: dict[str, str]) -> str:
    """The real path `path` leads to; each symlink met on the way goes into `links` (its
    location and its target, as written)."""
    parts = path.strip("/").split("/")
    current = "/"
    hops = 0
    while parts:
        step = os.path.join(current, parts.pop(0))
        if not os.path.islink(step):
            current = step
            continue
        hops += 1
        if hops > 40:
            raise OSError(f"too many symlinks on the way to {path}")
        links[step] = os.readlink(step)
        parts = os.path.normpath(os.path.join(current, links[step])).strip("/").split("/") + parts
        current = "/"
    return current


def _mounts() -> Iterator[str]:
    """The mount points of this mount namespace."""
    with open("/proc/self/mountinfo", errors="surrogateescape") as f:
        for line in f:
            yield re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])


def needed_paths(
    modules: Iterable[str] = (), paths: Iterable[str] = (), *, network: bool = False
) -> tuple[str, ...]:
    """What a call's root holds of the host: the system's and the interpreter's paths (see the
    module's docstring), the packages of `modules` and of `turnstile.core` (which tools
    import), and `paths` (the writable ones: bound read-only ahead, read-write in the call);
    with `network`, the resolver's and TLS's files of /etc too. Each as the real path to bind,
    or as "link\0target" for a symlink on the way to one (found here, once per sandbox, not
    in every call's tree). The mount points below a bound directory are listed too, after it:
    an overlay of a directory shows none of the mounts below it."""
    project = list(_packages(["turnstile.core", *modules]))
    links_out = [link for p in project if os.path.isdir(p) for link in _links_out(p)]
    etc = [*_ETC, *(_NETWORK_ETC if network else ())]
    every = [*_SYSTEM, *_installed(), *etc, *project, *links_out, *paths]
    links: dict[str, str] = {}
    binds = _outermost(_resolve(os.path.abspath(p), links) for p in every if os.path.lexists(p))
    below = {m for m in _mounts() if not _outside(m, binds) and m not in binds}
    below = {m for m in below if os.path.lexists(m)}  # not one deleted under its mount
    made = [f"{path}\0{target}" for path, target in sorted(links.items()) if _outside(path, binds)]
    return (*sorted({*binds, *below}), *made)


def unreadable(paths: Iterable[str]) -> str | None:
    """The first of `paths` the current user cannot read, if any."""
    for path in paths:
        mode = os.R_OK | (os.X_OK if os.path.isdir(path) else 0)
        if not os.access(path, mode):
            return path
    return None


def _mountpoint(path: str, directory: bool) -> None:
    """An empty directory or file to mount on at `path` (its parents made as needed), unless
    there is one already."""
    try:
        if directory:
            os.mkdir(path)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC))
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _mountpoint(path, directory)


def _namespaces() -> tuple[int, int]:
    """Handles on the launcher's mount namespace (the host's) and on this one, opened while
    the host's /proc is still mounted."""
    fd = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        launcher = int(os.read(fd, 4096).rsplit(b")", 1)[1].split()[1])
    finally:
        os.close(fd)
    host = os.open(f"/proc/{launcher}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    return host, os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


_own_namespace = -1
"""The handle on the call's mount namespace (`reveal` opens its tree's, `own_mounts` the call's
own): `show` returns there from the host's."""


def own_mounts() -> None:
    """Give this process (a call's) a mount namespace of its own, a copy of its tree's: what it
    mounts there (its tmpfs, its writable paths) goes with its last process."""
    global _own_namespace
    unshare(CLONE_NEWNS)
    _own_namespace = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def _copy(path: str, copy: str) -> None:
    """Copy the file `path` to a new file `copy`, with its owner and mode."""
    source = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        info = os.fstat(source)
        made = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while os.sendfile(made, source, None, 1 << 30):
                pass
            if os.geteuid() == 0:  # in a user namespace the host's owners are not mapped
                os.fchown(made, info.st_uid, info.st_gid)
            os.fchmod(made, stat.S_IMODE(info.st_mode))
        finally:
            os.close(made)
    finally:
        os.close(source)


class _Own:
    """Shows host files in the root through inodes of the call's own: a directory as a read-only
    overlay of it, a regular file as a copy, any other (a device) from an overlay of its
    directory. What they are made of waits in a tmpfs at `scratch` that `close` detaches (the
    mounts made from it keep what they use). Overlays of regular files have had inodes of their
    own since Linux 4.19 (older ones opened the host's file); the root needs 5.12 anyway."""

    def __init__(self, scratch: str) -> None:
        os.mkdir(scratch, 0o700)
        mount_tmpfs(scratch, "mode=0700")
        self._scratch = scratch
        self._made = 0
        self._empty = self._new()  # an overlay takes at least two layers
        self._dirs: dict[str, str] = {}

    def _new(self) -> str:
        self._made += 1
        path = f"{self._scratch}/{self._made}"
        os.mkdir(path, 0o700)
        return path

    def show(self, path: str, target: str) -> None:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            mount_overlay((path, self._empty), target)
        elif stat.S_ISREG(mode):
            copy = self._new() + "/file"
            _copy(path, copy)
            bind(copy, target)
            read_only(target)
        elif os.geteuid() != 0:  # in a user namespace no mount made there shows devices
            bind(path, target)
        else:
            parent, name = os.path.split(path)
            if parent not in self._dirs:
                self._dirs[parent] = self._new()
                mount_overlay((parent, self._empty), self._dirs[parent], devices=True)
            bind(f"{self._dirs[parent]}/{name}", target)

    def close(self) -> None:
        detach(self._scratch)
        os.rmdir(self._scratch)


class _Binds:
    """Shows host files in the root as binds of them (the host's inodes), read-only but for
    devices (a read-only mount is nodev too); the mounts below a bound path come with it."""

    def __init__(self) -> None:
        self._bound: list[str] = []

    def show(self, path: str, target: str) -> None:
        if _outside(path, self._bound):
            bind(path, target)
            if not stat.S_ISCHR(os.stat(path).st_mode):
                read_only(target)
            self._bound.append(path)

    def close(self) -> None:
        pass


def _build(root: str, needed: Iterable[str], own: bool) -> None:
    """Build the root at `root`, with the host's files in it the call's `own` inodes, or binds."""
    mount_tmpfs(root)
    shown = _Own(root + _SCRATCH) if own else _Binds()
    for entry in needed:
        path, _, target = entry.partition("\0")
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        if target:
            os.symlink(target, root + path)
            continue
        _mountpoint(root + path, os.path.isdir(path))
        shown.show(path, root + path)
    dev = root + "/dev"
    os.mkdir(dev)
    mount_tmpfs(dev, "mode=0755,size=64k")
    for name in _DEVICES:
        _mountpoint(f"{dev}/{name}", False)
        shown.show(f"/dev/{name}", f"{dev}/{name}")
    for name, fd in (("fd", ""), ("stdin", "/0"), ("stdout", "/1"), ("stderr", "/2")):
        os.symlink(f"/proc/self/fd{fd}", f"{dev}/{name}")
    for name in ("shm", "mqueue"):
        os.mkdir(f"{dev}/{name}")
    mount_tmpfs(f"{dev}/shm", "mode=1777,size=64m")
    os.makedirs(root + "/tmp", exist_ok=True)
    shown.close()
    os.makedirs(root + "/proc", exist_ok=True)
    # before the pivot: in a user namespace, only while the host's /proc is still there
    mount_proc(root + "/proc")


_OWN_INODES = "the host's files in its root are its own inodes: no lock on them reaches the host"


def _own_root(needed: Iterable[str], own: bool) -> Layer | None:
    """Build the root with the host's files the call's own inodes if `own` and it can, else
    with binds; says how that went if `own`."""
    if not own:
        _build(_BUILD_AT, needed, False)
        return None
    try:
        _build(_BUILD_AT, needed, True)
        if os.geteuid() != 0:
            return Layer(True, _OWN_INODES + " (but /dev's four devices: the host's, bound)")
        return Layer(True, _OWN_INODES)
    except OSError as e:
        detach(_BUILD_AT)
        _build(_BUILD_AT, needed, False)
        return Layer(False, e.strerror or str(e))


def reveal(needed: Iterable[str], own_inodes: bool) -> tuple[dict[str, int], Layer | None]:
    """Build the call's root, holding what `needed_paths` found read-only (through inodes of
    its own if `own_inodes`) and a /proc of the call's pid namespace, and make it this mount
    namespace's root. Returns {"/": a handle on the host's mount namespace}, through which
    `show` binds the call's own paths in when it comes; and, if `own_inodes`, whether they are
    its own."""
    global _own_namespace
    host, _own_namespace = _namespaces()
    umask = os.umask(0o022)  # the directories made are for everyone to enter
    try:
        locks = _own_root(needed, own_inodes)
        os.chdir(_BUILD_AT)
        pivot_root_here()
    except BaseException:
        os.close(host)
        raise
    finally:
        os.umask(umask)
    return {"/": host}, locks


def make_room(path: str) -> None:
    """An empty directory at `path` in the call's root to mount on (with any missing parents,
    for everyone to enter), unless there is one already."""
    umask = os.umask(0o022)
    try:
        _mountpoint(path, True)
    finally:
        os.umask(umask)


def show(paths: Iterable[str], covers: dict[str, int], keep: str | None = None) -> None:
    """Bind each of `paths` (the call's work dir, its writable paths) in read-write, as the
    host sees it, through the handle `reveal` left in `covers`. The mount at `keep` (the
    call's tmpfs) stays on top, even of a path bound above it."""
    paths = list(paths)
    hidden = None if keep is None or _outside(keep, paths) else keep
    kept = -1 if hidden is None else clone_mount(hidden)
    umask = os.umask(0o022)
    try:
        for path in paths:
            tree = clone_tree(covers["/"], _own_namespace, path)
            try:
                _mountpoint(path, stat.S_ISDIR(os.fstat(tree).st_mode))
                attach(tree, path)
            finally:
                os.close(tree)
        if hidden is not None:
            _mountpoint(hidden, True)
            attach(kept, hidden)
    finally:
        if hidden is not None:
            os.close(kept)
        os.umask(umask)


def private_ipc(rooted: bool) -> str:
    """Give this process (and all it starts) an IPC namespace of its own: SysV objects and
    POSIX message queues of its own, shown at /dev/mqueue in a root of its own."""
    unshare(CLONE_NEWIPC)
    if not rooted:
        return "SysV IPC and POSIX message queues of its own"
    mount_mqueue("/dev/mqueue")
    return "SysV IPC and POSIX message queues of its own, shown in /dev/mqueue"
