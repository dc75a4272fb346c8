"""`hedgespec bench ...`: the HedgeSpec benchmark (options: `hedgespec bench --help`).

A plugin of the `hedgespec` console script: `pyproject.toml` declares `register` under the
`hedgespec.commands` entry-point group, which `gateway.cli.commands` reads.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from bench.learner.hedgespec_args import add_arguments  # light: no torch at registration

    parser = sub.add_parser("bench", help="run the HedgeSpec benchmark on a drafter pool",
                            description="HedgeSpec benchmark: every method side by side on "
                                        "held-out prompts")
    add_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.learner.hedgespec_args import finish_args
    from bench.learner.hedgespec_run import run

    return run(finish_args(args))
