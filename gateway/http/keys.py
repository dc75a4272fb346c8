"""Accepted API keys, held only as SHA-256 digests.

A presented key is hashed and compared against every configured key's digest with
`hmac.compare_digest`, so neither the comparison nor the number of keys checked leaks timing.
Keys arrive as `SecretStr` from the settings and are never logged or stored in clear.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from pydantic import SecretStr


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeySet:
    """A set of accepted keys, stored only as SHA-256 digests."""

    def __init__(self, keys: Iterable[SecretStr | str]) -> None:
        raw = [k.get_secret_value() if isinstance(k, SecretStr) else k for k in keys]
        self._digests = [digest(k) for k in raw if k]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def accepts(self, presented: str | None) -> bool:
        if presented is None:
            return False
        candidate = digest(presented)
        matched = False
        for stored in self._digests:  # no early exit: constant work per configured key
            matched |= hmac.compare_digest(candidate, stored)
        return matched

    def __repr__(self) -> str:
        return f"KeySet({len(self._digests)} keys)"
