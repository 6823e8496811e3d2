"""Answer types the Responses traces name (`loop.output`), for structured output."""

from __future__ import annotations

import msgspec


class Weather(msgspec.Struct):
    """A city and its temperature in degrees Celsius."""

    city: str
    temp_c: int
