"""The async executor under its first name: `turnstile.executors.trio.run` is
`turnstile.executors.aio.run`, which runs under trio as under asyncio (see `aio`).

Importing this module needs trio itself, as it always did (`pip install 'turnstile[trio]'`).
"""

from __future__ import annotations

__all__ = ["Updates", "run", "updates"]

try:
    import trio  # noqa: F401  # this name promises trio: without it, say which extra installs it
except ModuleNotFoundError as error:
    from turnstile.providers.extras import missing_extra

    raise missing_extra(error, "trio", needed_by="turnstile.executors.trio") from None

from .aio import Updates as Updates
from .aio import run as run
from .aio import updates as updates
