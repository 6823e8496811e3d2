"""A sandbox gets exactly its tier's layers or is not built; each tier holds where its host can
give it, root or not: the attack tests run per tier (their `tier` fixtures), and here again as a
fresh unprivileged user, with user namespaces and without.

The helpers here (`sandbox_of`, `needs_any`) are what the attack tests build and skip with: a
tier this host cannot give, or a layer a tier leaves out, is a skip that names why.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
from turnstile.core import ToolOutcome
from turnstile.executors.sandbox import (
    DEFAULT_LIMITS,
    LAYERS,
    TIERS,
    Layer,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    available_layers,
    available_tiers,
)

from . import escape_tools as e
from . import hostile_tools as h

ROOT = Path(__file__).resolve().parents[2]
TIER_NAMES = tuple(TIERS)


def _unavailable(tier: str) -> str | None:
    missing = available_tiers()[tier].missing
    if not missing:
        return None
    return f"tier {tier!r} is not available here: " + "; ".join(
        f"{name}: {why}" for name, why in missing.items()
    )


def needs_tier(tier: str) -> None:
    """Skip, naming each missing layer, where this host cannot give `tier`."""
    why = _unavailable(tier)
    if why is not None:
        pytest.skip(why)


def sandbox_of(
    tier: str, tools: Iterable[Any], limits: SandboxLimits = DEFAULT_LIMITS, **options: Any
) -> Sandbox:
    """A sandbox of `tier`, skipping where this host cannot give it."""
    needs_tier(tier)
    return Sandbox(tools, limits, tier=tier, **options)


def layers_of(tier: str) -> Mapping[str, Layer]:
    """The layers a sandbox of `tier` has here: those it leaves out are not in force."""
    left_out = Layer(False, f"not in tier {tier!r}")
    return {n: layer if n in TIERS[tier] else left_out for n, layer in available_layers().items()}


def needs_any(layers: Mapping[str, Layer], *names: str) -> None:
    """Skip, naming why, unless one of `names` is in force in `layers` (a sandbox's)."""
    if not any(layers[name].in_force for name in names):
        reasons = "; ".join(f"{name}: {layers[name].detail}" for name in names)
        pytest.skip(f"nothing here contains this escape ({reasons})")


def needs_all(layers: Mapping[str, Layer], *names: str) -> None:
    """Skip, naming why, unless every one of `names` is in force in `layers`."""
    missing = [f"{name}: {layers[name].detail}" for name in names if not layers[name].in_force]
    if missing:
        pytest.skip(f"not in force here: {'; '.join(missing)}")


# What a tier is: its layers, all of them or no sandbox.


def without(*names: str) -> Callable[[bool], dict[str, Layer]]:
    """A probe finding this machine's layers, with `names` missing (each for a reason naming
    it)."""
    found = {
        **available_layers(),
        **{name: Layer(False, f"no {name} on this host") for name in names},
    }
    return lambda network: found


def test_a_sandbox_missing_layers_of_its_tier_raises_naming_each_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import turnstile.executors.sandbox as sandbox

    monkeypatch.setattr(sandbox, "probe", without("landlock", "seccomp"))
    before = h.launchers()
    for tier in TIERS:
        with pytest.raises(SandboxUnavailable) as raised:
            Sandbox([h.add], tier=tier)
        assert raised.value.tier == tier
        assert raised.value.missing == {
            "landlock": "no landlock on this host",
            "seccomp": "no seccomp on this host",
        }
        assert "landlock: no landlock on this host; seccomp: no seccomp on this host" in str(
            raised.value
        )
    assert h.launchers() == before  # nothing was started, let alone run


def test_a_tier_holds_without_the_layers_it_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import turnstile.executors.sandbox as sandbox

    monkeypatch.setattr(sandbox, "probe", without("cgroup", "separate_uid"))
    with pytest.raises(SandboxUnavailable, match="missing cgroup, separate_uid"):
        Sandbox([h.add])  # the default, full, needs both
    if not available_tiers()["unprivileged"].available:
        pytest.skip(f"unprivileged: {available_tiers()['unprivileged'].missing}")
    with Sandbox([h.add], tier="unprivileged") as box:
        assert box.run("add", {"a": 1, "b": 2}) == ("3", False)
        assert box.layers["cgroup"] == Layer(False, "no cgroup on this host")


def test_the_default_tier_is_the_strongest_and_never_falls_back() -> None:
    full = available_tiers()["full"]
    assert next(iter(TIERS)) == "full" and TIERS["full"] == LAYERS
    if not full.available:
        with pytest.raises(SandboxUnavailable) as raised:
            Sandbox([h.add])
        assert raised.value.missing == full.missing
        return
    with Sandbox([h.add]) as box:
        assert box.tier == "full" and all(layer.in_force for layer in box.layers.values())


def test_each_tier_is_a_subset_of_the_one_before_it() -> None:
    tiers = list(TIERS.values())
    assert all(set(weaker) < set(stronger) for stronger, weaker in itertools.pairwise(tiers))
    assert {"cgroup", "separate_uid"} & set(TIERS["unprivileged"]) == set()
    assert {"landlock", "seccomp", "rlimits"} <= set(TIERS["landlock"])
    assert not {name for name in TIERS["landlock"] if "namespace" in name}


def test_available_tiers_name_each_missing_layer_of_each_tier_and_why() -> None:
    layers = available_layers()
    for name, tier in available_tiers().items():
        assert tier.layers == TIERS[name]
        expected = {n: layers[n].detail for n in TIERS[name] if not layers[n].in_force}
        assert tier.missing == expected and tier.available == (not expected)


def test_a_weaker_tier_applies_only_its_own_layers(tmp_path: Path) -> None:
    needs_tier("landlock")
    secret = tmp_path / "host-file"
    secret.write_text("host")
    with Sandbox([e.reads, h.where_am_i], tier="landlock") as box:
        assert box.tier == "landlock"
        assert [n for n, layer in box.layers.items() if layer.in_force] == list(TIERS["landlock"])
        # no root of its own, yet Landlock lets it read only what that root would hold
        assert json_of(box.run("reads", {"paths": [str(secret)]})) == {
            str(secret): "PermissionError"
        }
        assert "reads only what a root of its own would hold" in box.layers["landlock"].detail
    with pytest.raises(ValueError, match="unknown sandbox tier 'strong'"):
        Sandbox([h.add], tier="strong")


def json_of(outcome: ToolOutcome) -> Any:
    assert not outcome.is_error, outcome.content
    return msgspec.json.decode(outcome.content)


# As a fresh user: the attack tests, run by pytest as a user of no privilege at all.

_ATTACKS = ["tests/executors/test_sandbox_security.py", "tests/executors/test_sandbox_root.py"]
_USER = 50_000 + os.getpid() % 10_000
"""A uid no account has (below 65536, so that a user namespace mapping those can hold it)."""
_RUN = """
import os, site, sys
before = list(sys.path)
site.addsitedir(sys.argv[1])
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p not in before)
os.environ.update(LOGNAME=f"uid{os.getuid()}", USER=f"uid{os.getuid()}", HOME="/tmp")
import pytest
sys.exit(pytest.main(["-p", "no:cacheprovider", "-rs", "-vv", *sys.argv[2:]]))
"""
_WITHOUT_USER_NAMESPACES = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:
        os._exit(111)
    os.write(ready_w, b"x")
    os.read(go_r, 1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write("0 0 65536")
os.write(go_w, b"x")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
"""Runs argv in a user namespace of its own whose `user.max_user_namespaces` is 0: for the
processes in it, user namespaces are off, as the host's sysctl set to 0 would make them for
every process of the machine (here, only theirs)."""


def _open_to_all(path: str, mode: int = stat.S_IXOTH) -> bool:
    """Whether any user can reach `path` (no directory on the way is closed) and run it (or
    what `mode` says)."""
    real = Path(os.path.realpath(path))
    reached = all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    return reached and real.stat().st_mode & mode == mode


def _interpreter() -> str | None:
    """This Python, or the same version elsewhere, that a user of no privilege can run."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    for found in (sys.executable, getattr(sys, "_base_executable", ""), system):
        if found and _open_to_all(found):
            return found
    return None


def _as_fresh_user(wrap: Callable[[list[str]], list[str]], *args: str) -> str:
    """The output of pytest run on `args` as `_USER`, within what `wrap` adds to the command."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become a fresh user (setpriv)")
    setpriv, python = shutil.which("setpriv"), _interpreter()
    if setpriv is None:
        pytest.skip("no setpriv (util-linux) to run as a fresh user")
    if python is None:
        pytest.skip(f"no python{sys.version_info[0]}.{sys.version_info[1]} any user can run")
    site = sysconfig.get_paths()["purelib"]
    for needed in (str(ROOT / "tests" / "executors"), site):
        if not _open_to_all(needed, stat.S_IROTH | stat.S_IXOTH):
            pytest.skip(f"a fresh user could not read {needed}")
    user = ["--reuid", str(_USER), "--regid", str(_USER), "--clear-groups", "--reset-env"]
    command = [setpriv, *user, python, "-I", "-S", "-c", _RUN, site, *args]
    done = subprocess.run(
        wrap(command),
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout


def _ran(output: str, tier: str) -> list[str]:
    """The tests of `tier` that passed in a verbose pytest output."""
    return re.findall(rf"^(\S+\[{tier}\]) PASSED", output, re.MULTILINE)


def _skipped(output: str, tier: str) -> list[str]:
    """The reasons tests of `tier` were skipped, from pytest's `-rs` summary."""
    return re.findall(rf"^SKIPPED \[\d+\] .*?: (.*\b{tier}\b.*)$", output, re.MULTILINE)


def test_without_root_the_unprivileged_and_landlock_tiers_hold() -> None:
    output = _as_fresh_user(lambda command: command, *_ATTACKS)
    assert _ran(output, "unprivileged") and _ran(output, "landlock"), output[-4000:]
    assert any("tier 'full' is not available here" in why for why in _skipped(output, "full"))


def test_without_root_or_user_namespaces_the_landlock_tier_holds() -> None:
    wrap = [sys.executable, "-c", _WITHOUT_USER_NAMESPACES]
    probe = subprocess.run([*wrap, "true"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"cannot turn user namespaces off here (status {probe.returncode})")
    output = _as_fresh_user(lambda command: [*wrap, *command], *_ATTACKS)
    assert _ran(output, "landlock") and not _ran(output, "unprivileged"), output[-4000:]
    reasons = _skipped(output, "unprivileged")
    assert reasons and all("user namespace" in why for why in reasons), reasons


# The tier table of docs/how-to/sandbox.md: each cell as the tests and the tiers say.

_DOCS = ROOT / "docs" / "how-to" / "sandbox.md"
_MODULES = ("test_sandbox_security.py", "test_sandbox_root.py", "test_sandbox_resources.py")
_NEEDS = re.compile(r"needs(?:_any|_all)?\((?:[\w.]+(?:\([^)]*\))?, )?((?:\"\w+\"(?:, )?)+)\)")


def _rows() -> list[list[str]]:
    text = _DOCS.read_text().split("<!-- tier table:", 1)[1].split("\n\n", 1)[0]
    lines = [line for line in text.splitlines()[3:] if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def _source(test: str) -> str:
    for module in _MODULES:
        text = (ROOT / "tests" / "executors" / module).read_text()
        if f"def {test}(" in text:
            return text.split(f"def {test}(", 1)[1].split("\ndef ", 1)[0]
    raise AssertionError(f"the docs' tier table names {test}, which no sandbox test module has")


def test_each_cell_of_the_docs_tier_table_is_what_its_test_and_the_tiers_say() -> None:
    rows = _rows()
    assert len(rows) >= 15
    for _attack, contained, *cells, test in rows:
        expression = contained.split(" (", 1)[0]
        any_of = " or " in expression or " and " not in expression
        layers = expression.split(" or " if any_of else " and ")
        source = _source(test.strip("`"))
        uses_tier = re.search(r"\b(box|warm|tier)\b", source.split(")", 1)[0])
        assert uses_tier, f"{test} does not run per tier"
        needed = {name for found in _NEEDS.findall(source) for name in re.findall(r"\w+", found)}
        assert needed == ({*layers} - {"session"}), (test, needed, layers)
        has = any if any_of else all
        expected = ["✓" if has(n in TIERS[t] for n in layers) else "—" for t in TIER_NAMES]
        assert cells == expected, (test, cells, expected)
