"""`hedgespec drafter ...` subcommands.

`inspect` is here; the registry commands (add, list, enable, disable, remove, retry, import)
are `gateway.cli.registry`, whose `register(drafter_subparsers)` adds them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gateway.cli import registry


def register(sub: Any) -> None:
    drafter = sub.add_parser("drafter", help="inspect and manage EAGLE-3 drafters")
    drafter_sub = drafter.add_subparsers(dest="drafter_command", required=True, metavar="ACTION")
    _register_inspect(drafter_sub)
    registry.register(drafter_sub)


def _register_inspect(drafter_sub: Any) -> None:
    p = drafter_sub.add_parser(
        "inspect",
        help="check a drafter checkpoint against a target",
        description="Print one JSON object. Exit 0 if compatible, 1 if not, 2 if unreadable.",
    )
    p.add_argument("drafter_dir", type=Path, metavar="DRAFTER_DIR")
    p.add_argument("--target", type=Path, required=True, metavar="TARGET_DIR")
    p.add_argument("--subfolder", help="the drafter's sub-folder inside DRAFTER_DIR")
    p.set_defaults(handler=inspect)


def inspect(args: argparse.Namespace) -> int:
    from core.api import DrafterLoadError, inspect_drafter

    try:
        report = inspect_drafter(args.drafter_dir, args.target, args.subfolder)
    except DrafterLoadError as exc:
        print(json.dumps({"compatible": False, "readable": False, "reason": str(exc)}))
        return 2
    print(json.dumps(report.to_json(), default=str))
    if not report.readable:
        return 2
    return 0 if report.compatible else 1
