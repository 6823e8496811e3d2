"""Optional dependencies for every part of turnstile: `required` imports a package an extra
installs, and `missing_extra` turns a failed import into a `MissingExtra` that names the
`pip install 'turnstile[extra]'` to run."""

from __future__ import annotations

__all__ = ["missing_extra", "required"]

from ._optional import missing_extra as missing_extra
from ._optional import required as required
