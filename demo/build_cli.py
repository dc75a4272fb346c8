"""The build's command line, shared by `hedgespec demo build` and `python -m demo.pipeline`.

Import-light on purpose (argparse only): the gateway's CLI registers these options at start-up
and imports torch and the pipeline only when a build actually runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from demo.domains import POOL_DIR


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=POOL_DIR, help="output directory (default demo/pool)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: exercises the code in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=None, help="reuse target/rollouts from DIR")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a build setting, e.g. --set specialist.steps=300 --set device=cuda",
    )  # fmt: skip


def run_build(args: argparse.Namespace) -> Path:
    """Build the pool the parsed options describe; returns the path of its pool.json."""
    from demo.build_config import FULL, QUICK, with_overrides
    from demo.pipeline import build

    cfg = with_overrides(QUICK if args.quick else FULL, args.set)
    return build(args.out, quick=args.quick, seed=args.seed, config=cfg, cache_dir=args.cache)
