"""The `hedgespec` console script (`main`) and its sub-commands (`gateway.cli.commands`)."""

from gateway.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
