"""Plain decoding, HedgeSpec drafting every step, and HedgeSpec under the speculation gate
(EngineConfig.speculation = "auto", core/spec_gate.py), side by side at 1 to 8 concurrent
streams on the shipped pool: what the gate buys under load and what it costs alone.

    python -m bench.speculation_gate [--quick] [--pool demo/pool/pool.json] [--threads 2]
                                     [--dtype auto] [--levels 1,2,4,8] [--max-new 48]
                                     [--repeats 2]

Method in the report's header (bench/speculation_gate_report.py). Writes
bench/results/speculation_gate.{md,json,png}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from bench.hedgespec_bench import DEFAULT_POOL, Prompt, load_prompts
from bench.machine import describe_machine
from bench.speculation_gate_report import MODES, Cell, plot, render, rows
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.precision import auto_dtype
from demo.pool_target import open_pool_engine

RESULTS = Path(__file__).resolve().parent / "results"
POLICY = "normalhedge"
WARMUP_GROUPS = 12  # groups run at most before a level's measured passes, until the gate chose


def engines(base: SpecEngine) -> dict[str, SpecEngine]:
    """One engine per mode over the base's target and drafters; plain = policy none."""
    def with_mode(speculation: str) -> SpecEngine:
        return SpecEngine(base.target, dict(base.snapshot.drafters),
                          replace(base.config, speculation=speculation), base.model_name)

    always = with_mode("always")
    return {"plain": always, "always": always, "auto": with_mode("auto")}


@dataclass
class Tally:
    """What one pass's groups did."""

    outputs: list[tuple[int, ...]] = field(default_factory=list)
    spec_steps: int = 0
    spec_tokens: int = 0
    plain_steps: int = 0
    full_tokens: int = 0  # committed in steps whose round held every stream of the group
    full_s: float = 0.0


def run_group(engine: SpecEngine, prompts: list[Prompt], policy: str, max_new: int,
              tally: Tally) -> None:
    """The prompts started together and stepped to completion, counted into `tally`."""
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
    ids: dict[str, list[int]] = {}
    last = {}
    for i, p in enumerate(prompts):
        engine.add_request(f"g{i}", p.ids, params, policy)
        ids[f"g{i}"] = []
    while engine.has_unfinished():
        t0 = time.perf_counter()
        outs = engine.step()
        if sum(o.round is not None for o in outs) == len(prompts):
            tally.full_s += time.perf_counter() - t0
            tally.full_tokens += sum(len(o.token_ids) for o in outs)
        for out in outs:
            if out.error:
                raise RuntimeError(out.error)
            ids[out.request_id] += out.token_ids
            last[out.request_id] = out.stats
    tally.outputs += [tuple(x) for x in ids.values()]
    if policy != "none":
        tally.spec_steps += sum(s.rounds for s in last.values())
        tally.spec_tokens += sum(s.completion_tokens - s.prefill_tokens - s.gated_tokens
                                 for s in last.values())
    tally.plain_steps += sum(s.gated_rounds for s in last.values())


def one_pass(engine: SpecEngine, mode: str, groups: list[list[Prompt]], max_new: int) -> Cell:
    tally = Tally()
    t0 = time.perf_counter()
    for group in groups:
        run_group(engine, group, "none" if mode == "plain" else POLICY, max_new, tally)
    wall = time.perf_counter() - t0
    return Cell(mode, len(groups[0]), sum(len(o) for o in tally.outputs), wall,
                tally.spec_steps, tally.spec_tokens, tally.plain_steps, tally.full_tokens,
                tally.full_s, tuple(tally.outputs))


def warm_gate(engine: SpecEngine, groups: list[list[Prompt]], max_new: int) -> str:
    """Run groups of this size until the gate has chosen for it; its choice in words."""
    n = len(groups[0])
    for i in range(WARMUP_GROUPS):
        if engine.gate.describe(n) != "measuring":
            break
        run_group(engine, groups[i % len(groups)], POLICY, max_new, Tally())
    rates = ", ".join(f"{k} {v:.1f}" for k, v in engine.gate.rates(n).items())
    return f"{engine.gate.describe(n)} ({rates})"


def measure_level(modes: dict[str, SpecEngine], prompts: list[Prompt], n: int, max_new: int,
                  repeats: int) -> tuple[list[Cell], str]:
    groups = [[prompts[(g * n + i) % len(prompts)] for i in range(n)] for g in range(2)]
    choice = warm_gate(modes["auto"], groups, max_new)
    print(f"{n} streams: the gate chose {choice}", flush=True)
    best: dict[str, Cell] = {}
    for r in range(repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            cell = one_pass(modes[mode], mode, groups, max_new)
            if mode not in best or cell.tokens_per_s > best[mode].tokens_per_s:
                best[mode] = cell
            print(f"  {mode:<7} {cell.tokens_per_s:6.2f} tokens/s  MAT {cell.mat:.2f}  "
                  f"plain steps {cell.plain_steps}", flush=True)
    return list(best.values()), choice


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2, help="passes per mode (fastest kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="levels 1,2, 8 tokens: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.levels, args.max_new, args.repeats = "1,2", 8, 1
    torch.set_num_threads(args.threads)
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    config = EngineConfig(max_context=4096, dtype=dtype, tree=served_tree("cpu"),
                          selector=served_selector("cpu"), max_running=16)
    base = open_pool_engine(args.pool, config)
    prompts = load_prompts(args.pool, base.tokenizer, 3, 200)
    base.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=4))  # warm-up
    modes = engines(base)
    cells: list[Cell] = []
    choices: dict[str, str] = {}
    for n in (int(x) for x in args.levels.split(",")):
        level, choices[str(n)] = measure_level(modes, prompts, n, args.max_new, args.repeats)
        cells += level
    tree = config.tree
    meta = {"machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "max_new": args.max_new,
            "repeats": args.repeats, "tree": (tree.top_k, tree.depth, tree.total_tokens),
            "eval_every": config.selector.eval_every, "choices": choices}
    args.out.mkdir(parents=True, exist_ok=True)
    cell_rows = [{k: v for k, v in asdict(c).items() if k != "outputs"} for c in cells]
    (args.out / "speculation_gate.json").write_text(json.dumps(
        {"meta": meta, "cells": cell_rows, "levels": rows(cells)}, indent=1) + "\n")
    (args.out / "speculation_gate.md").write_text(render(cells, meta))
    plot(cells, args.out / "speculation_gate.png")
    print(render(cells, meta))


if __name__ == "__main__":
    main()
