"""The Anthropic Messages API codec: neutral requests to JSON bodies, bodies and stream events back.

Pure: no I/O and no SDK objects, only the JSON that POST /v1/messages documents, so any transport
(the SDK, a replay, a test) can carry it. `StreamAccumulator.result()` folds a stream into the body
the non-streaming API would have sent and decodes that, so both paths give the same response.
`decode_request` reads a request body back, for conversations recorded elsewhere.
"""

__all__ = ["Client", "StreamAccumulator", "decode", "decode_request", "encode"]

from turnstile.providers._client import Wire as _Wire
from turnstile.providers._client import WireClient as _WireClient

from ._decode import decode
from ._encode import encode
from ._request import decode_request
from ._stream import StreamAccumulator


class Client(_WireClient):
    """This format over `anthropic.Anthropic()` (`complete`) or `AsyncAnthropic()` (`acomplete`):
    `Client(sdk, model=..., stream=False, on_delta=None, cache=None, sdk_retries=False,
    **options)`; see `WireClient` (the SDK's own retries are off unless `sdk_retries=True`)."""

    wire = _Wire(
        "anthropic", "/v1/messages", "claude-sonnet-4-6", encode, decode, StreamAccumulator
    )
