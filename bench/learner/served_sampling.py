"""What a client gets by default: plain decoding, the generalist and HedgeSpec at one stream,
greedy, at the pool's own sampling defaults (what a request that leaves temperature out gets;
the demo pool states SmolLM2's model-card values, core/model/sampling_defaults.py) and at OpenAI's
temperature 1, side by side in one run on the shipped pool. HedgeSpec runs the served selector
(core.config.served_selector): NormalHedge with the time loss, plain decoding an extra arm of
each request's learner, so it may decode plain where drafting would not pay; its MAT counts its
speculative rounds only.

    python -m bench.learner.served_sampling [--quick] [--pool demo/pool/pool.json] [--per-domain 2]
                                    [--max-new 48] [--repeats 2] [--threads 2] [--dtype auto]

Prompt i samples with seed i under every method. Each (setting, method) runs its prompts once
per pass; passes alternate the methods' order and the fastest pass is kept. Writes
bench/results/served_sampling.{md,json,png}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bench.learner.hedgespec_bench import fresh_model_free
from bench.learner.served_sampling_report import METHODS, Cell, plot, render
from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype


def settings(engine: SpecEngine) -> dict[str, dict[str, float]]:
    return {"greedy": {"temperature": 0.0}, "model default": dict(engine.sampling_defaults),
            "OpenAI default": {"temperature": 1.0}}


def one_pass(engine: SpecEngine, prompts: list[Prompt], setting: str,
             sampling: dict[str, float], method: str, max_new: int) -> Cell:
    tokens = spec_tokens = rounds = 0
    fresh_model_free(engine)  # no pass drafts an answer an earlier pass gave
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        params = SamplingParams(max_new_tokens=max_new, seed=i,
                                temperature=sampling.get("temperature", 1.0),
                                top_p=sampling.get("top_p", 1.0),
                                top_k=int(sampling.get("top_k", 0)))
        ids, st = engine.generate_ids(p.ids, params, METHODS[method])
        tokens += len(ids)
        spec_tokens += st.completion_tokens - st.prefill_tokens - st.plain_tokens
        rounds += st.rounds
    return Cell(setting, method, tokens, spec_tokens, rounds, time.perf_counter() - t0)


def measure(engine: SpecEngine, prompts: list[Prompt], max_new: int, repeats: int) -> list[Cell]:
    best: dict[tuple[str, str], Cell] = {}
    for setting, sampling in settings(engine).items():
        for r in range(repeats):
            for method in METHODS if r % 2 == 0 else list(METHODS)[::-1]:
                cell = one_pass(engine, prompts, setting, sampling, method, max_new)
                key = (setting, method)
                if key not in best or cell.tokens_per_s > best[key].tokens_per_s:
                    best[key] = cell
                print(f"{setting:<15} {method:<11} {cell.tokens_per_s:6.2f} tokens/s  "
                      f"MAT {cell.mat:.2f}", flush=True)
    return list(best.values())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2, help="passes per method (fastest kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="1 prompt a domain, 8 tokens, 1 pass")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.per_domain, args.max_new, args.repeats = 1, 8, 1
    torch.set_num_threads(args.threads)
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    config = EngineConfig(max_context=4096, dtype=dtype, tree=served_tree("cpu"),
                          selector=served_selector("cpu"))
    engine = SpecEngine.from_pool_file(args.pool, config)
    prompts = load_prompts(args.pool, engine.tokenizer, args.per_domain, 200)
    engine.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=4))  # warm-up
    cells = measure(engine, prompts, args.max_new, args.repeats)
    tree = config.tree
    meta = {"machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "prompts": len(prompts),
            "max_new": args.max_new, "repeats": args.repeats,
            "tree": (tree.top_k, tree.depth, tree.total_tokens),
            "settings": settings(engine)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "served_sampling.json").write_text(json.dumps(
        {"meta": meta, "cells": [asdict(c) for c in cells]}, indent=1) + "\n")
    (args.out / "served_sampling.md").write_text(render(cells, meta))
    plot(cells, args.out / "served_sampling.png")
    print(render(cells, meta))


if __name__ == "__main__":
    main()
