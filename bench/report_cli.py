"""The tail every results-writing benchmark's command shares: run, write the report, print it
(or, with --json, the results as JSON on stdout and the progress on stderr)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Log = Callable[[str], None]


def run_and_report(run_all: Callable[[Any, Log], dict[str, Any]],
                   write_report: Callable[[dict[str, Any], Path], object], args: Any,
                   report_md: str) -> int:
    """`run_all(args, log)`, then `write_report(results, args.out)`; prints `args.out /
    report_md`, or the public results (keys not starting with `_`) as JSON with `args.json`."""
    log: Log = ((lambda s: print(s, file=sys.stderr, flush=True)) if args.json
                else (lambda s: print(s, flush=True)))
    results = run_all(args, log)
    write_report(results, args.out)
    public = {k: v for k, v in results.items() if not k.startswith("_")}
    if args.json:
        print(json.dumps(public, indent=2, default=str))
    else:
        print((Path(args.out) / report_md).read_text())
    return 0
