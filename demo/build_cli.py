"""The build's command line, shared by `hedgespec demo build` and `python -m demo.pipeline`.

Import-light on purpose (argparse only): the gateway's CLI registers these options at start-up
and imports torch and the pipeline (`demo.pipeline.run_build`) only when a build actually runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from demo.domains import POOL_DIR


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=POOL_DIR,
                        help="output directory (default demo/pool)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: exercises the code in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cache", type=Path, default=default_cache(),
        help="stage cache: rollout chunks and trained drafters, so a build resumes (default "
             "%(default)s)",
    )
    parser.add_argument("--no-cache", dest="cache", action="store_const", const=None,
                        help="keep nothing between runs")
    parser.add_argument("--rollouts", type=Path, default=None,
                        help="rollouts file to reuse or write (default: demo/data/rollouts for a "
                             "full build)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a build setting, e.g. --set specialist.steps=300 --set device=cuda",
    )  # fmt: skip


def default_cache() -> Path:
    import os

    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HEDGESPEC_BUILD_CACHE") or Path(xdg) / "hedgespec" / "build")
