"""The built-in stop conditions for `LoopSpec.stop_when`: plain data, so a spec holding them
still dumps and loads (any pure function of the `LoopState` works too, but is code)."""

__all__ = ["HasToolCall", "TextContains", "TurnCountIs"]

from ._spec import HasToolCall as HasToolCall
from ._spec import TextContains as TextContains
from ._spec import TurnCountIs as TurnCountIs
