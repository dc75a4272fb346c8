"""Where provisioned targets are converted to, and the error when one cannot be."""

from __future__ import annotations

import os
from pathlib import Path


class ProvisionError(RuntimeError):
    """A target cannot be provisioned (its wheel is missing, a wrong file, a failed
    conversion)."""


def cache_root() -> Path:
    """`HEDGESPEC_TARGET_CACHE`, else `$XDG_CACHE_HOME/hedgespec/targets` (~/.cache/...)."""
    explicit = os.environ.get("HEDGESPEC_TARGET_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "hedgespec" / "targets"
