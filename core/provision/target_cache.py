"""Where provisioned targets are converted to, and the error when one cannot be."""

from __future__ import annotations

from pathlib import Path

from core.config import cache_dir


class ProvisionError(RuntimeError):
    """A target cannot be provisioned (its wheel is missing, a wrong file, a failed
    conversion)."""


def cache_root() -> Path:
    """`HEDGESPEC_TARGET_CACHE`, else `$XDG_CACHE_HOME/hedgespec/targets` (~/.cache/...)."""
    return cache_dir("HEDGESPEC_TARGET_CACHE", "targets")
