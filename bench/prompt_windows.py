"""HedgeSpec with feedback from the prompt's tail (SelectorConfig.prompt_windows) against the
learner starting uniform, the generalist, the router and the per-request oracle, side by side.

    python -m bench.prompt_windows [--quick] [--pool demo/pool/pool.json] [--threads 2]
                                   [--per-domain 3] [--max-new-tokens 48]
                                   [--windows 0,8,16,32,48,96]

One engine (the served selector: NormalHedge, the CPU's eval_every) runs every drafter alone
(for the generalist and the per-request oracle), then HedgeSpec once per prompt-window count W
(W = 0: the learner starts uniform, as before prompt windows), greedy, on the held-out prompts
of every domain interleaved. Also reported: how often HedgeSpec's first round already used the
request's best fixed drafter (the oracle's pick). Writes bench/results/prompt_windows.{md,json,
png}. MAT does not depend on the machine's speed; tokens/s do (run it on an idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from bench.hedgespec_bench import (
    DEFAULT_POOL,
    Run,
    load_prompts,
    oracle_runs,
    run_method,
    summarize,
    variant,
)
from bench.hedgespec_run import generalist_id
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.precision import auto_dtype, cpu_has_native_bf16
from demo.pool_target import open_pool_engine

RESULTS = Path(__file__).resolve().parent / "results"


def measure(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    config = EngineConfig(max_context=4096, dtype=args.dtype, tree=served_tree("cpu"),
                          selector=served_selector("cpu"))
    engine = open_pool_engine(args.pool, config)
    prompts = load_prompts(args.pool, engine.tokenizer, args.per_domain, 160)
    gen = generalist_id(args.pool, engine.drafter_ids())
    engine.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=8))  # warm-up
    alone: dict[str, list[Run]] = {}
    for d in engine.drafter_ids():
        alone[d] = timed(log, d, lambda d=d: run_method(engine, prompts, d, f"fixed:{d}",
                                                        args.max_new_tokens))
    oracle = oracle_runs(alone)
    best = [o.drafters[0] if o.drafters else None for o in oracle]
    rows: dict[str, dict[str, Any]] = {
        "generalist": row(alone[gen], None, None),
        "oracle": row(oracle, None, None),
    }
    if engine.router is not None:
        router = timed(log, "router", lambda: run_method(engine, prompts, "router", "router",
                                                         args.max_new_tokens))
        rows["router"] = row(router, None, _hits(router, best))
    for w in args.windows:
        eng = variant(engine, prompt_windows=w)
        runs = timed(log, f"hedgespec W={w}", lambda eng=eng: run_method(
            eng, prompts, "hedgespec", "normalhedge", args.max_new_tokens))
        rows[f"hedgespec W={w}"] = row(runs, w, _hits(runs, best))
    return {"rows": rows, "prompts": len(prompts),
            "domains": sorted({p.domain for p in prompts})}


def timed(log: Any, name: str, fn: Any) -> list[Run]:
    t0 = time.perf_counter()
    runs: list[Run] = fn()
    log(f"  {name:<16} MAT {summarize(runs)['mat']:.3f}  ({time.perf_counter() - t0:.0f}s)")
    return runs


def _hits(runs: list[Run], best: list[str | None]) -> float:
    hits = [bool(r.drafters) and r.drafters[0] == b for r, b in zip(runs, best, strict=True)]
    return sum(hits) / len(hits)


def row(runs: list[Run], windows: int | None, first_hits: float | None) -> dict[str, Any]:
    s = summarize(runs)
    return {"windows": windows, "mat": s["mat"], "tokens_per_s": s["tokens_per_s"],
            "first_round_best": first_hits}


def render(results: dict[str, Any], meta: dict[str, Any]) -> str:
    rows = results["rows"]
    gen, oracle = rows["generalist"]["mat"], rows["oracle"]["mat"]
    lines = [
        "# HedgeSpec with feedback from the prompt's tail", "",
        f"`{meta['command']}` on {meta['machine']}; {meta['dtype']}, {meta['threads']} "
        f"thread(s); {results['prompts']} held-out prompts ({len(results['domains'])} domains "
        f"interleaved), {meta['max_new']} new tokens each, greedy; served selector (NormalHedge, "
        f"eval_every {meta['eval_every']}). W = prompt positions scored as feedback windows "
        "before the first round (0: the learner starts uniform). First round on the best = "
        "share of requests whose first round used the drafter that was best for that request "
        "alone (the oracle's pick). MAT = tokens after the first / rounds.", "",
        "| method | MAT | x generalist | x oracle | first round on the best | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        hits = "" if r["first_round_best"] is None else f"{r['first_round_best']:.0%}"
        lines.append(f"| {name} | {r['mat']:.3f} | {r['mat'] / gen:.3f} | {r['mat'] / oracle:.3f} "
                     f"| {hits} | {r['tokens_per_s']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["rows"]
    sweep = [(r["windows"], r["mat"]) for r in rows.values() if r["windows"] is not None]
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.plot([w for w, _ in sweep], [m for _, m in sweep], marker="o", label="HedgeSpec")
    for name, style in (("oracle", "--"), ("generalist", ":"), ("router", "-.")):
        if name in rows:
            ax.axhline(rows[name]["mat"], linestyle=style, color="grey", label=name)
    ax.set_xlabel("prompt windows W")
    ax.set_ylabel("MAT")
    ax.set_title("HedgeSpec MAT vs feedback from the prompt (SmolLM2-135M pool)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--windows", default="0,8,16,32,48,96")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="1 prompt a domain, 16 tokens, W 0 and 16")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.per_domain, args.max_new_tokens, args.windows = 1, 16, "0,16"
    args.windows = [int(w) for w in args.windows.split(",")]
    args.dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    results = measure(args, lambda msg: print(msg, flush=True))
    meta = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                       f"visible, native bf16: {cpu_has_native_bf16()}",
            "dtype": args.dtype, "threads": args.threads, "max_new": args.max_new_tokens,
            "eval_every": served_selector("cpu").eval_every,
            "command": "python -m bench.prompt_windows" + (" --quick" if args.quick else "")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_windows.json").write_text(
        json.dumps({"meta": meta, **results}, indent=1) + "\n")
    (args.out / "prompt_windows.md").write_text(render(results, meta))
    plot(results, args.out / "prompt_windows.png")
    print(render(results, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
