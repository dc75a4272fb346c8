"""`hedgespec bench ...`: the HedgeSpec benchmark (options: `hedgespec bench --help`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from bench.hedgespec_run import add_arguments

    parser = sub.add_parser("bench", help="run the HedgeSpec benchmark on a drafter pool",
                            description="HedgeSpec benchmark: every method side by side on held-out prompts")
    add_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.hedgespec_run import finish_args, run

    return run(finish_args(args))
