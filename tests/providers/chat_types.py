"""Answer types the Chat Completions traces name (`loop.output`), for structured output."""

from __future__ import annotations

import msgspec


# Unknown fields forbidden: the schema then says `additionalProperties: false`, which OpenAI's
# strict mode requires. The docstring is the schema's description, which the model reads.
class Weather(msgspec.Struct, forbid_unknown_fields=True):
    """A city and its temperature in degrees Celsius."""

    city: str
    temp_c: int
