"""The loop's phase table drawn: Mermaid (no graphviz needed) or Graphviz DOT source."""

__all__ = ["dot", "mermaid"]

from ._machine import dot as dot
from ._machine import mermaid as mermaid
