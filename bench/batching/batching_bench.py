"""Batched rounds vs round-robin (issue 16): aggregate tokens/s and per-stream inter-token
latency at 1, 2, 4, 8 and 16 concurrent streams, both schedulers side by side in one run,
in-process and through the gateway.

    python -m bench.batching.batching_bench [--pool POOL_JSON] [--quick] [--no-gateway]
                                            [--threads 2] [--dtype auto] [--repeats 1]
                                            [--out bench/results/batching.md]

Method. Two engines over the same target and drafters differ only in
`EngineConfig.batching` (batched: one step = one round for every running request, their
trees verified in one target pass; round-robin: a step holds one request's round, the
requests taking turns, through the same code). Two `hedgespec serve` processes differ only
in HEDGESPEC_BATCHING.
At each concurrency level N, N streams start together (prompts cycled, greedy, `ignore_eos`,
a fixed token count, stream i seeded with i in both modes, so that each request's learner
draws the same drafters and both schedulers do the same rounds: the acceptance loss, drafting
every round, in-process and `--loss length` on the servers); the modes alternate at each
level (batched, round-robin, round-robin, batched, ...) so both see the same machine load. One
stream is measured `--single-repeats` times (default 6): a 5% difference is below this shared
machine's run-to-run spread (+-10%). Every ratio is the median of the paired runs' ratios.
Aggregate tokens/s = all tokens / wall time from the first request to the last token;
inter-token latency of a stream = (last token time - first token time) / (tokens - 1),
averaged over the streams; TTFT = first token - start.
The gateway is measured first, while this process has run no model: measured after the
in-process phase, the servers' one-stream ratio came out 0.90-0.91x in three runs, against
0.96-1.01x in stand-alone gateway A/B runs of the same requests (the cause, something this
process leaves behind after its own torch work, was not isolated).
Writes batching.md, batching.json and batching.png next to each other (`--out`).
Run it on an idle machine: the CPU box may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from bench.batching.batching_report import Cell, plot, render, summarise
from bench.harness.environ import patched_environ
from bench.machine import repo_path
from bench.paths import RESULTS
from bench.speed.gateway_bench import (
    PROMPTS,
    Run,
    completion_body,
    resolve_pool,
    run_concurrent,
    start_server,
)

LEVELS = (1, 2, 4, 8, 16)
QUICK_LEVELS = (1, 2)
MODES = ("batched", "round-robin")


def engines(base: Any) -> dict[str, Any]:
    """The two schedulers over one target and the whole pool in its order (max_running: every
    stream of the largest level runs at once). Each holds its own model-free members, fresh
    here and kept for the run as a server keeps its own: a shared suffix cache would hand one
    scheduler the answers the other produced."""
    from bench.learner.hedgespec_bench import fresh_model_free
    from bench.learner.model_free_bench import engine_over

    built = {}
    for mode in MODES:
        built[mode] = engine_over(base, dict(base.snapshot.members),
                                  replace(base.config, batching=mode == "batched",
                                          max_running=max(LEVELS)))
        fresh_model_free(built[mode])
    return built


def run_streams(engine: Any, prompts: list[list[int]], max_tokens: int,
                policy: str) -> tuple[list[Run], float]:
    """All `prompts` started together in the engine, stepped to completion."""
    from core.config import SamplingParams

    start = time.perf_counter()
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    tokens = dict.fromkeys((f"s{i}" for i in range(len(prompts))), 0)
    for i, ids in enumerate(prompts):
        params = SamplingParams(max_new_tokens=max_tokens, ignore_eos=True, seed=i)
        engine.add_request(f"s{i}", ids, params, policy)
    while engine.has_unfinished():
        for out in engine.step():
            if out.error:
                raise RuntimeError(out.error)
            if out.token_ids:
                now = time.perf_counter()
                first.setdefault(out.request_id, now)
                last[out.request_id] = now
                tokens[out.request_id] += len(out.token_ids)
    wall = time.perf_counter() - start
    return [Run(first[r] - start, last[r] - start, n) for r, n in tokens.items()], wall


T = TypeVar("T")


def cycled(items: list[T], n: int) -> list[T]:
    return [items[i % len(items)] for i in range(n)]


def paired_order(repeats: int) -> Iterator[str]:
    """The modes of `repeats` pairs, each pair in the other order than the one before (ABBA...),
    so neither mode always runs first after a level change or a slow stretch of the machine."""
    for k in range(repeats):
        yield from (MODES if k % 2 == 0 else MODES[::-1])


def level_repeats(n: int, repeats: int, single_repeats: int) -> int:
    return max(repeats, single_repeats) if n == 1 else repeats


def measure_in_process(base: Any, prompts: list[list[int]], levels: tuple[int, ...],
                       max_tokens: int, policy: str, repeats: tuple[int, int]) -> list[Cell]:
    cells = []
    eng = engines(base)
    for e in eng.values():
        run_streams(e, prompts[:1], 4, policy)  # warm-up
        e.forget_costs()  # it measured lazy set-up, not the load (as the server forgets it)
    for n in levels:
        for mode in paired_order(level_repeats(n, *repeats)):
            runs, wall = run_streams(eng[mode], cycled(prompts, n), max_tokens, policy)
            cells.append(Cell("in-process", mode, n, runs, wall))
            print(f"in-process {mode:12s} {n:2d} streams: "
                  f"{sum(r.tokens for r in runs) / wall:7.1f} tok/s")
    return cells


@contextlib.contextmanager
def gateways(pool: Path, workdir: Path, threads: int, dtype: str) -> Iterator[dict[str, str]]:
    """One `hedgespec serve` per mode (base URLs), stopped on exit."""
    procs, urls = [], {}
    try:
        for mode in MODES:
            (workdir / mode).mkdir()
            with patched_environ({"HEDGESPEC_BATCHING": str(mode == "batched").lower(),
                                  "HEDGESPEC_MAX_RUNNING": str(max(LEVELS))}):
                proc, urls[mode] = start_server(pool, workdir / mode, threads, dtype)
            procs.append(proc)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(60)


def measure_gateway(urls: dict[str, str], prompts: list[list[int]], levels: tuple[int, ...],
                    max_tokens: int, policy: str, repeats: tuple[int, int]) -> list[Cell]:
    import httpx

    model = httpx.get(f"{urls[MODES[0]]}/v1/models", timeout=30).json()["data"][0]["id"]
    for url in urls.values():  # warm-up
        asyncio.run(run_concurrent(url, [completion_body(prompts[0], 4, policy, model)]))
    cells = []
    for n in levels:
        bodies = [{**completion_body(p, max_tokens, policy, model), "seed": i}
                  for i, p in enumerate(cycled(prompts, n))]
        for mode in paired_order(level_repeats(n, *repeats)):
            runs, wall = asyncio.run(run_concurrent(urls[mode], bodies))
            cells.append(Cell("gateway", mode, n, runs, wall))
            print(f"gateway    {mode:12s} {n:2d} streams: "
                  f"{sum(r.tokens for r in runs) / wall:7.1f} tok/s")
    return cells


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pool", type=Path, help="pool.json (default: the shipped demo pool)")
    parser.add_argument("--quick", action="store_true",
                        help="1 and 2 streams, few tokens (a smoke run)")
    parser.add_argument("--no-gateway", action="store_true", help="in-process only")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    parser.add_argument("--dtype", default="auto", help="auto = what `hedgespec serve` picks here")
    parser.add_argument("--policy", default="auto")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode and level")
    parser.add_argument("--single-repeats", type=int, default=6,
                        help="runs per mode at one stream (quick: --repeats)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="tokens per stream (default 48, quick 8)")
    parser.add_argument("--levels", type=lambda s: tuple(int(x) for x in s.split(",")),
                        default=None,
                        help="concurrency levels, e.g. 1,8 (default 1,2,4,8,16; quick 1,2)")
    parser.add_argument("--out", type=Path, default=RESULTS / "batching.md")
    return parser.parse_args(argv)


def _repeats(args: argparse.Namespace) -> tuple[int, int]:
    return args.repeats, args.repeats if args.quick else args.single_repeats


def run_meta(args: argparse.Namespace, pool: Path, base: Any, dtype: str, levels: tuple[int, ...],
             max_tokens: int, load: tuple[float, ...]) -> dict[str, Any]:
    return {
        "command": "python -m bench.batching.batching_bench" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average at start "
                   + ", ".join(f"{x:.1f}" for x in load),
        "pool": repo_path(pool), "model": base.model_name, "drafters": base.drafter_ids(),
        "threads": args.threads, "dtype": dtype, "policy": args.policy,
        "tree": str(base.config.tree),
        "levels": list(levels), "max_tokens": max_tokens, "repeats": args.repeats,
        "single_repeats": _repeats(args)[1],
        "max_step_tokens": base.config.max_step_tokens,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    import torch

    from core.config import EngineConfig, served_selector, served_tree
    from core.engine import SpecEngine
    from core.model.precision import auto_dtype

    torch.set_num_threads(args.threads)
    levels = args.levels or (QUICK_LEVELS if args.quick else LEVELS)
    max_tokens = args.max_tokens or (8 if args.quick else 48)
    with tempfile.TemporaryDirectory() as tmp:
        pool = resolve_pool(args.pool, Path(tmp))
        load = os.getloadavg()
        dtype = auto_dtype() if args.dtype == "auto" else args.dtype
        # The acceptance loss (drafting every round, as start_server's `--loss length`): the time
        # loss's choices follow each scheduler's measured times, so the modes' rounds would differ.
        selector = replace(served_selector("cpu"), loss="length")
        base = SpecEngine.from_pool_file(pool, EngineConfig(dtype=dtype, tree=served_tree("cpu"),
                                                            selector=selector))
        prompts = [list(base.tokenizer(p)["input_ids"]) for p in PROMPTS]
        cells = []
        if not args.no_gateway:  # first: the servers then share the box with an idle client
            with gateways(pool, Path(tmp), args.threads, dtype) as urls:
                cells += measure_gateway(urls, prompts, levels, max_tokens, args.policy,
                                         _repeats(args))
        cells += measure_in_process(base, prompts, levels, max_tokens, args.policy,
                                    _repeats(args))
        meta = run_meta(args, pool, base, dtype, levels, max_tokens, load)
    summary = summarise(cells)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(summary, meta))
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "summary": summary},
                                                        indent=2) + "\n")
    plot(summary, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
