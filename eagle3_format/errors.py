"""The one error of the checkpoint format's rules."""

from __future__ import annotations


class DrafterConfigError(ValueError):
    """A drafter checkpoint breaks a rule of the format (the message says which).

    Readers re-raise it as their own error (`core.model.eagle3.DrafterLoadError`,
    `drafter_registry.errors.CheckpointError`) with the same message."""
