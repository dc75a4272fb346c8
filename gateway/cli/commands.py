"""The `hedgespec` command table: built-in sub-commands, plugins, the parser and `main`.

Each sub-command module has `register(subparsers) -> None`, which adds its parser and sets
`handler=<function(args) -> int>`. The gateway's own commands (serve, drafter) are imported
here by name. Commands of other packages plug in through the `hedgespec.commands` entry-point
group: this repository's `pyproject.toml` declares `bench = "bench.cli:register"` and
`demo = "demo.cli:register"`, so `hedgespec bench` and `hedgespec demo` exist wherever the
project is installed while `gateway` never imports `bench` or `demo` (both depend on the
product, not the reverse).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from gateway.cli import drafter, serve

PLUGIN_GROUP = "hedgespec.commands"
Register = Callable[[Any], None]
COMMANDS: tuple[Register, ...] = (serve.register, drafter.register)


def plugin_commands() -> list[Register]:
    """The `register` functions declared under `PLUGIN_GROUP` by installed distributions.

    A plugin whose package is not installed is skipped (the Docker image copies no `bench/`);
    any other error inside a plugin surfaces, so a broken one is never silently missing.
    """
    found = []
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
        try:
            found.append(point.load())
        except ModuleNotFoundError as exc:  # skip only if the plugin's own package is missing
            if exc.name is None or not (point.module + ".").startswith(exc.name + "."):
                raise
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hedgespec",
        description="OpenAI-compatible gateway with no-regret EAGLE-3 drafter selection.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in [*COMMANDS, *plugin_commands()]:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code
