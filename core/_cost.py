"""What a call costs: a model's prices as plain data in the spec, applied to a reply's `Usage`."""

from __future__ import annotations

__all__ = ["Price"]

import math

import msgspec

from ._errors import InvalidSpec
from ._fields import check_fields
from ._messages import Usage


class Price(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One model's prices, in any currency per million tokens (as price lists give them):
    uncached input, output, and input read from or written to the prompt cache (None: priced as
    uncached input)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        prices = (self.input, self.output, self.cache_read or 0.0, self.cache_write or 0.0)
        if not all(0.0 <= p < math.inf for p in prices):
            raise InvalidSpec("every price is a finite number, 0 or more", field="Price")

    def of(self, usage: Usage) -> float:
        """What `usage` costs. Its `input_tokens` counts the whole prompt, cached parts included:
        the parts read from or written to the cache are priced as such, the rest as input."""
        read, written = usage.cache_read_tokens, usage.cache_write_tokens
        uncached = max(usage.input_tokens - read - written, 0)
        read_price = self.input if self.cache_read is None else self.cache_read
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            uncached * self.input
            + read * read_price
            + written * write_price
            + usage.output_tokens * self.output
        ) / 1_000_000
