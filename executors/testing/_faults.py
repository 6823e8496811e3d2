"""The faults a simulation injects: each kind weighted (`Faults`), each drawn by seed at a site of
the run (the n-th tool call, model call, approval, journal write or round of tool calls), and
written down (`Fault`) so that a schedule can be replayed, shrunk and kept as a test."""

from __future__ import annotations

__all__ = ["Fault", "FaultKind", "Faults", "Schedule"]

import enum
from collections.abc import Iterable
from typing import Any

import msgspec


class FaultKind(enum.StrEnum):
    """What goes wrong, and where: each kind belongs to one site (its prefix)."""

    tool_raise = "tool_raise"
    """The tool raises before it takes effect: the model gets an error result."""
    tool_hang = "tool_hang"
    """The tool never returns: the tool's timeout or the run's deadline has to end it."""
    tool_slow = "tool_slow"
    """The tool takes 20 to 60 times as long (its timeout may end it)."""
    tool_garbage = "tool_garbage"
    """The tool takes effect and returns bytes that mean nothing."""
    model_retryable = "model_retryable"
    """The model call fails in a way worth retrying (a 429 with a retry-after)."""
    model_final = "model_final"
    """The model call fails for good (a 400, an invalid key)."""
    model_malformed = "model_malformed"
    """The model's client hands back something that is not a reply (its bug)."""
    wire_429 = "wire_429"
    """Under a trace's real SDK client: a 429 with a `retry-after`."""
    wire_5xx = "wire_5xx"
    """Under a trace's real SDK client: a 500, 503 or 529."""
    wire_quota = "wire_quota"
    """Under a trace's real SDK client: a 429 saying the quota is spent (final)."""
    wire_reset = "wire_reset"
    """Under a trace's real SDK client: the connection reset mid-body."""
    wire_cut = "wire_cut"
    """Under a trace's real SDK client: the stream cut mid-event."""
    wire_malformed = "wire_malformed"
    """Under a trace's real SDK client: a body or an event that is not JSON."""
    wire_timeout = "wire_timeout"
    """Under a trace's real SDK client: the read times out."""
    approval_late = "approval_late"
    """The person answers an approval an hour later."""
    approval_denied = "approval_denied"
    """The person denies the call."""
    approval_edited = "approval_edited"
    """The person approves the call with other arguments, which fit the tool's schema."""
    crash = "crash"
    """The process dies as the journal is written; a fresh driver resumes from the journal."""
    reorder = "reorder"
    """A round's tool calls come back in a shuffled order."""

    @property
    def site(self) -> str:
        """Where the kind strikes: tool, model, approval, write or round."""
        return _SITES[self]


_SITES = {
    **{k: k.value.partition("_")[0] for k in FaultKind},
    FaultKind.crash: "write",
    FaultKind.reorder: "round",
}


class Faults(msgspec.Struct, frozen=True, kw_only=True):
    """How often each fault strikes, as a chance per site (each tool call, model call, approval,
    journal write, round of two or more tool calls; the `wire_` kinds at each model call of a
    trace, through its real SDK client); 0 switches a kind off. The chances of one
    site's kinds add up to at most 1. `Faults.none()` is a world where nothing goes wrong."""

    tool_raise: float = 0.05
    tool_hang: float = 0.02
    tool_slow: float = 0.05
    tool_garbage: float = 0.03
    model_retryable: float = 0.05
    model_final: float = 0.01
    model_malformed: float = 0.01
    wire_429: float = 0.02
    wire_5xx: float = 0.02
    wire_quota: float = 0.005
    wire_reset: float = 0.01
    wire_cut: float = 0.01
    wire_malformed: float = 0.005
    wire_timeout: float = 0.01
    approval_late: float = 0.1
    approval_denied: float = 0.1
    approval_edited: float = 0.1
    crash: float = 0.03
    reorder: float = 0.5

    def __post_init__(self) -> None:
        for site in set(_SITES.values()):
            chances = [getattr(self, k.value) for k in FaultKind if k.site == site]
            if any(not 0 <= c <= 1 for c in chances) or sum(chances) > 1 + 1e-9:
                raise ValueError(
                    f"the chances of the {site} faults must each be in [0, 1] and add up to "
                    f"at most 1, not {chances}"
                )

    @classmethod
    def none(cls) -> Faults:
        """No fault of any kind."""
        return cls(**dict.fromkeys((k.value for k in FaultKind), 0.0))

    @classmethod
    def only(cls, **chances: float) -> Faults:
        """A world where only the kinds named strike, at the chances given:
        `Faults.only(crash=0.1)`."""
        return msgspec.structs.replace(cls.none(), **chances)


class Fault(msgspec.Struct, frozen=True, array_like=True):
    """One fault of a schedule: `kind` at the `n`-th opportunity (from 0) of its site in a seed's
    run, counted across crashes."""

    kind: FaultKind
    n: int


_MASK = (1 << 64) - 1
_SITE_KEYS = {"approval": 1, "model": 2, "round": 3, "tool": 4, "write": 5, "wire": 6}
"""Each site's part in its opportunities' random numbers: fixed, so a seed's run stays the
same when a site is added."""


class Draws:
    """The random numbers of one opportunity (splitmix64): the same in every process, cheap
    to make, and unchanged by what happened at other opportunities (a fault removed in
    shrinking moves nothing else)."""

    __slots__ = ("_state",)

    def __init__(self, seed: int, site: str, n: int) -> None:
        key = seed * 0x9E3779B97F4A7C15 + _SITE_KEYS[site] * 0xC2B2AE3D27D4EB4F
        self._state = (key + n * 0x165667B19E3779F9) & _MASK

    def random(self) -> float:
        """A number in [0, 1)."""
        self._state = z = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return ((z ^ (z >> 31)) >> 11) / 9007199254740992.0

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def randint(self, low: int, high: int) -> int:
        """An integer from `low` to `high`, both included."""
        return low + int(self.random() * (high - low + 1))

    def shuffle(self, items: list[Any]) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = self.randint(0, i)
            items[i], items[j] = items[j], items[i]


class Schedule:
    """The faults of one seed's run: drawn at each opportunity from `weights`, or, given
    `fixed`, exactly those (a schedule replayed or shrunk). `struck` lists those that struck."""

    def __init__(self, seed: int, weights: Faults, fixed: Iterable[Fault] | None = None) -> None:
        self.seed = seed
        self._fixed = None if fixed is None else {(f.kind.site, f.n): f.kind for f in fixed}
        self._seen = dict.fromkeys(_SITE_KEYS, 0)
        self._chances = {
            site: [(k, getattr(weights, k.value)) for k in FaultKind if k.site == site]
            for site in _SITE_KEYS
        }
        self.struck: list[Fault] = []

    def draw(self, site: str) -> tuple[FaultKind | None, Draws]:
        """The next opportunity at `site`: the fault that strikes there, if any, and its random
        numbers (durations, an order)."""
        n = self._seen[site]
        self._seen[site] = n + 1
        r = Draws(self.seed, site, n)
        u = r.random()
        if self._fixed is not None:
            kind = self._fixed.get((site, n))
        else:
            kind = None
            for k, chance in self._chances[site]:
                if (u := u - chance) < 0:
                    kind = k
                    break
        if kind is not None:
            self.struck.append(Fault(kind, n))
        return kind, r
