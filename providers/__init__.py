"""turnstile.providers: the neutral messages on three wire formats, over the official SDKs.

The codecs are submodules (`anthropic_messages`, `openai_chat`, `openai_responses`, each with
`encode`, `decode`, `StreamAccumulator` and `Client`), and so are wire traces (`replay`); here
are what they share: their errors, stream deltas and the encode cache, and `model_client`,
which builds a codec's `Client` from a model string (`"openai:gpt-4.1"`), and `portable`,
which carries a history recorded on one format over to another by written rules.
"""

__all__ = [
    "ArgumentsDelta",
    "DecodeError",
    "Delta",
    "MissingAPIKey",
    "MissingExtra",
    "ModelRouter",
    "ProviderError",
    "TextDelta",
    "ThinkingDelta",
    "UnsupportedContent",
    "WireCache",
    "model_client",
    "portable",
]

from ._cache import WireCache as WireCache
from ._deltas import ArgumentsDelta as ArgumentsDelta
from ._deltas import Delta as Delta
from ._deltas import TextDelta as TextDelta
from ._deltas import ThinkingDelta as ThinkingDelta
from ._errors import DecodeError as DecodeError
from ._errors import ProviderError as ProviderError
from ._errors import UnsupportedContent as UnsupportedContent
from ._models import MissingAPIKey as MissingAPIKey
from ._models import ModelRouter as ModelRouter
from ._models import model_client as model_client
from ._optional import MissingExtra as MissingExtra
from ._portable import portable as portable
