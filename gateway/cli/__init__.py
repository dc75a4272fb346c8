"""The `hedgespec` console script (`main`) and its sub-commands."""

from gateway.cli.commands import main

__all__ = ["main"]
