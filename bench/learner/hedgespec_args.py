"""The options of `hedgespec bench`, apart from the benchmark: the `hedgespec` console script
builds every plugin's parser on each start (`hedgespec serve` included), so this module imports
nothing heavy (the benchmark's modules import the engine, torch and transformers)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--quick", action="store_true",
                    help="fewer prompts and pool sizes (< 5 minutes)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--per-domain", type=int, default=None, help="held-out prompts per domain")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--max-prompt-tokens", type=int, default=160)
    ap.add_argument("--pool-sizes", type=str, default=None, help="comma-separated N values")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1 = stable timings)")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--depth", type=int, default=None)
    ap.add_argument("--total-tokens", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=None,
                    help="HedgeSpec scores every drafter every n-th round (default: what "
                         "`hedgespec serve` uses on the device); eval_every=1 runs alongside")
    ap.add_argument("--prompt-windows", type=int, default=None,
                    help="HedgeSpec's prompt windows (default: what `hedgespec serve` uses); "
                         "the learners also run without them (hedgespec_cold)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--device", default="cpu",
                    help="torch device of target and drafters (cuda on a GPU)")
    ap.add_argument("--dtype", default="float32",
                    help="float32 (the demo pool's training precision), bfloat16, float16")


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    args.per_domain = args.per_domain or (2 if args.quick else 8)
    args.max_new_tokens = args.max_new_tokens or (48 if args.quick else 96)
    sizes = args.pool_sizes or ("2,8,32" if args.quick else "2,4,8,16,32")
    args.sizes = [int(s) for s in sizes.split(",")]
    return args
