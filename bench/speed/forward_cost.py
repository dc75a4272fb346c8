"""What one target pass costs as the number of new tokens T grows, and what the MLP's matrix
products cost as their row count grows: the cost structure that decides whether a draft tree of
T tokens can pay for itself on this machine.

    python -m bench.speed.forward_cost [--quick] [--pool demo/pool/pool.json] [--threads 2]
                                 [--dtypes float32,bfloat16] [--context 300] [--repeats 15]

1. Target passes: held-out prompts, concatenated to `--context` tokens, are prefilled once,
   then passes of T new tokens
   (causal, on top of that cache) run interleaved over the sizes, the cache cropped back to the
   context after each, so every pass sees the same context; each pass also computes the LM-head
   row of its first token, as verification always does. Medians over `--repeats`.
2. GEMM: the first decoder layer's MLP up-projection (a [rows, hidden] x [hidden, intermediate]
   product) for each row count, cache-warm, median per call.

A tree of T tokens per round breaks even with plain decoding only when it commits at least
c(T)/c(1) tokens a round (drafting and evaluation left out, so this is a lower bound); 1.5x
plain needs 1.5 c(T)/c(1). Writes bench/results/forward_cost.{md,json,png}. Run it idle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, load_prompts
from core.config import EngineConfig, served_tree
from core.engine import SpecEngine
from core.model.precision import cpu_has_native_bf16
from core.model.target import Target, compact_cache

SIZES = (1, 2, 4, 8, 12, 16, 21, 32)
GEMM_ROWS = (1, 2, 4, 8, 12, 16, 21, 32, 64)


@dataclass(frozen=True)
class PassCost:
    tokens: int  # T: new tokens in the pass
    ms: float  # median wall time of the pass


@dataclass(frozen=True)
class GemmCost:
    rows: int
    us: float  # median wall time of one product
    gflops: float


def pass_costs(target: Target, context: torch.Tensor, sizes: tuple[int, ...],
               repeats: int) -> list[PassCost]:
    """Median time of a T-token pass on top of the same `context` for every T in `sizes`."""
    n = context.numel()
    cache = target.new_cache()
    target.forward(cache, context, torch.arange(n), last_logits_only=True)
    # Any tokens do: the cost does not depend on their values. Reuse the context's.
    new = context[torch.arange(max(sizes)) % n]
    samples: dict[int, list[float]] = {t: [] for t in sizes}
    keep = torch.zeros(0, dtype=torch.long)  # no new entry stays: back to the context
    for _ in range(repeats):
        for t in sizes:  # interleaved, so drift during the run touches every size alike
            t0 = time.perf_counter()
            target.forward(cache, new[:t], torch.arange(n, n + t)).compute([0])
            samples[t].append(time.perf_counter() - t0)
            compact_cache(cache, n, keep)
    return [PassCost(t, 1000 * statistics.median(samples[t])) for t in sizes]


def gemm_costs(weight: torch.Tensor, rows: tuple[int, ...], repeats: int) -> list[GemmCost]:
    """Median time of x[rows, in] @ weight[out, in].T for each row count."""
    out_f, in_f = weight.shape
    costs = []
    for m in rows:
        x = torch.randn(m, in_f, dtype=weight.dtype)
        for _ in range(3):  # warm the caches and the kernel choice
            F.linear(x, weight)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            F.linear(x, weight)
            times.append(time.perf_counter() - t0)
        us = 1e6 * statistics.median(times)
        costs.append(GemmCost(m, us, 2 * m * out_f * in_f / us / 1e3))
    return costs


def render(runs: dict[str, tuple[list[PassCost], list[GemmCost]]], meta: dict[str, Any]) -> str:
    lines = [
        "# Target pass cost against the number of new tokens", "",
        f"`python -m bench.speed.forward_cost` on {meta['machine']}; {meta['target']}, "
        f"{meta['threads']} thread(s); context {meta['context']} tokens; "
        f"medians of {meta['repeats']} passes per size, sizes interleaved. c(T) is a pass of "
        "T new tokens plus the LM-head row of its first token; the MAT columns leave drafting "
        "and evaluation out, so they are lower bounds for a tree of T tokens per round "
        f"(the CPU default tree verifies {meta['default_tree_tokens']} tokens).",
    ]
    for dtype, (passes, gemms) in runs.items():
        lines += ["", f"## {dtype}", ""] + pass_table(passes) + [
            "", f"MLP up-projection ({meta['gemm_shape']}), {dtype}, cache-warm:", "",
            "| rows | us | GFLOP/s | us per row |", "|---|---|---|---|"]
        lines += [f"| {g.rows} | {g.us:.0f} | {g.gflops:.1f} | {g.us / g.rows:.0f} |"
                  for g in gemms]
    return "\n".join(lines) + "\n"


def pass_table(passes: list[PassCost]) -> list[str]:
    one = next(p.ms for p in passes if p.tokens == 1)
    lines = ["| T | ms | c(T)/c(1) | MAT to break even | MAT for 1.5x plain |",
             "|---|---|---|---|---|"]
    for p in passes:
        r = p.ms / one
        lines.append(f"| {p.tokens} | {p.ms:.1f} | {r:.2f} | {r:.2f} | {1.5 * r:.2f} |")
    return lines


def plot(runs: dict[str, tuple[list[PassCost], list[GemmCost]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for dtype, (passes, gemms) in runs.items():
        one = next(p.ms for p in passes if p.tokens == 1)
        ts = [p.tokens for p in passes]
        line = ax1.plot(ts, [p.ms / one for p in passes], "o-", label=f"{dtype}: break even")
        ax1.plot(ts, [1.5 * p.ms / one for p in passes], "s--", color=line[0].get_color(),
                 label=f"{dtype}: 1.5x plain")
        ax2.plot([g.rows for g in gemms], [g.gflops for g in gemms], "o-", label=dtype)
    ax1.set_xlabel("new tokens per pass (T)")
    ax1.set_ylabel("MAT needed")
    ax1.set_title("Tokens a round must commit")
    ax1.legend(fontsize=8)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("rows")
    ax2.set_ylabel("GFLOP/s")
    ax2.set_title("MLP up-projection throughput")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def context_ids(pool: Path, tokenizer: Any, length: int) -> torch.Tensor:
    """`length` tokens of held-out prompts, concatenated (a real chat context, not noise)."""
    ids = torch.tensor([t for p in load_prompts(pool, tokenizer, 3, 400) for t in p.ids])
    return ids[torch.arange(length) % ids.numel()]


def measure(pool: Path, dtype: str, context: int, repeats: int,
            ) -> tuple[Any, tuple[list[PassCost], list[GemmCost]]]:
    config = EngineConfig(max_context=4096, dtype=dtype, tree=served_tree("cpu"))
    engine = SpecEngine.from_pool_file(pool, config)
    target = engine.target
    passes = pass_costs(target, context_ids(pool, engine.tokenizer, context), SIZES, repeats)
    gemms = gemm_costs(target.decoder_layers[0].mlp.up_proj.weight, GEMM_ROWS, 20 * repeats)
    return engine, (passes, gemms)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default=None,
                    help="comma-separated; default float32, plus bfloat16 on a CPU with native "
                         "bf16 (emulated bf16 is ~30x slower and not worth a row)")
    ap.add_argument("--quick", action="store_true", help="3 repeats: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 3
    torch.set_num_threads(args.threads)
    dtypes = (args.dtypes.split(",") if args.dtypes
              else ["float32"] + (["bfloat16"] if cpu_has_native_bf16() else []))
    runs = {}
    for dtype in dtypes:
        engine, runs[dtype] = measure(args.pool, dtype, args.context, args.repeats)
    weight = engine.target.decoder_layers[0].mlp.up_proj.weight
    meta = {"machine": describe_machine(),
            "target": engine.model_name, "threads": args.threads, "context": args.context,
            "repeats": args.repeats, "default_tree_tokens": engine.config.tree.total_tokens + 1,
            "gemm_shape": f"[rows, {weight.shape[1]}] x [{weight.shape[1]}, {weight.shape[0]}]"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "forward_cost.json").write_text(json.dumps(
        {"meta": meta, "runs": {d: {"passes": [asdict(p) for p in ps],
                                    "gemm": [asdict(g) for g in gs]}
                                for d, (ps, gs) in runs.items()}}, indent=1) + "\n")
    text = render(runs, meta)
    (args.out / "forward_cost.md").write_text(text)
    plot(runs, args.out / "forward_cost.png")
    print(text)


if __name__ == "__main__":
    main()
