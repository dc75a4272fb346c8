"""`hedgespec bench ...`: the HedgeSpec benchmark (options: `hedgespec bench --help`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("bench", help="run the HedgeSpec benchmark on a drafter pool", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.hedgespec_run import main

    return main(list(args.rest))
