"""turnstile.providers: the neutral messages on three wire formats, over the official SDKs."""

from ._cache import WireCache as WireCache
from ._deltas import ArgumentsDelta as ArgumentsDelta
from ._deltas import Delta as Delta
from ._deltas import TextDelta as TextDelta
from ._deltas import ThinkingDelta as ThinkingDelta
from ._errors import DecodeError as DecodeError
from ._errors import ProviderError as ProviderError
from ._errors import UnsupportedContent as UnsupportedContent
from ._optional import MissingExtra as MissingExtra
