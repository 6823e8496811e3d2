"""Reading JSON from outside, bounded: what the providers and the executors decode (a model's
reply, a trace, a journal's record) goes through `decoded`, so a depth bomb, a huge input or
text that is not UTF-8 gives the caller's own typed error; `shallow` asks the same of a value
already decoded."""

__all__ = ["decoded", "shallow"]

from ._decoding import decoded as decoded
from ._decoding import shallow as shallow
