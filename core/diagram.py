"""The loop's phase table drawn, as Mermaid (no graphviz needed) or Graphviz DOT source, and the
moves (`Decision`) it lets the loop make on each event."""

__all__ = ["Decision", "dot", "mermaid"]

from ._machine import Decision as Decision
from ._machine import dot as dot
from ._machine import mermaid as mermaid
