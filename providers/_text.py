"""Text off the wire as a run can keep it: every string whole UTF-16, so it encodes as UTF-8.

JSON may spell any UTF-16 code unit as an escape, so a reply can carry half of a surrogate pair:
a character cut between two stream deltas (`\\ud83d` + `\\ude00`), or a lone half a buggy server
or a cut-off model wrote. Python keeps such a half as a lone surrogate, which no UTF-8 encoder
takes: printing it, sending it back or writing down the run would fail. Text is data, so a pair
is joined and a lone half becomes U+FFFD, the replacement character, as a UTF-8 decoder does
with bytes it cannot read.
"""

from __future__ import annotations

__all__ = ["Pieces", "heal"]

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def heal(text: str) -> str:
    """`text` with each pair of UTF-16 surrogates joined into its character and each lone half
    replaced by U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class Pieces:
    """Text arriving in fragments. A high surrogate ending a fragment waits for its low half, so
    a character split between the UTF-16 code units of its escape (`\\ud83d` + `\\ude00`) is
    joined again instead of showing as two lone code points; what `add` returns and `text`
    gives is healed (`heal`), so it adds up to `heal` of the fragments joined."""

    __slots__ = ("_held", "_pieces")

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._held = ""

    def __bool__(self) -> bool:
        return bool(self._pieces or self._held)

    def add(self, fragment: str) -> str:
        """Take a fragment; return the part of it that can be shown now."""
        if self._held:
            fragment, self._held = self._held + fragment, ""
        if fragment and "\ud800" <= fragment[-1] <= "\udbff":
            fragment, self._held = fragment[:-1], fragment[-1]
        if _SURROGATE.search(fragment) is not None:
            fragment = heal(fragment)
        if fragment:
            self._pieces.append(fragment)
        return fragment

    def text(self) -> str:
        return "".join(self._pieces) + heal(self._held)
