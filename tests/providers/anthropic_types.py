"""Answer types the Anthropic traces name (`loop.output: "tests.providers.anthropic_types:..."`)."""

from __future__ import annotations

import msgspec


# unknown fields refused: the schema says `additionalProperties: false`, as strict tools and
# structured outputs require of every object
class Weather(msgspec.Struct, forbid_unknown_fields=True):
    """The warmer city and its temperature."""

    city: str
    temp_c: int
