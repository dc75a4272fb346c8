"""CPU defaults by measurement: dtype, torch threads and the draft tree that give the
generalist the most tokens/s on this CPU, with plain decoding measured alongside.

    python -m bench.speed.cpu_defaults [--quick] [--pool demo/pool/pool.json] [--per-domain 1]
                                 [--trees-only] [--temperature 0] [--policy fixed:generalist]

Two sweeps on the shipped pool, greedy, the same held-out prompts for every setting:
1. precision x threads (fp32 / bf16, 1 / 2 threads) at the current default tree, each with
   plain decoding (`none`) and the generalist (`fixed:generalist`);
2. the tree (top_k, depth, total_tokens) at the best precision and thread count, with plain
   decoding measured again beside the trees.
Each setting keeps the fastest of `--repeats` passes, interleaved across the settings of a sweep.
Writes bench/results/cpu_defaults.{md,json,png}. Run it on an idle machine.

`--trees-only --temperature 1 --policy normalhedge` runs the tree sweep alone at the given
temperature (prompt i sampled with seed i), for a policy, at the CPU's auto dtype and two
threads: what the tree does to MAT and tokens/s when sampling (cpu_defaults_t1.*).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from core.config import EngineConfig, SamplingParams, TreeConfig, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype, cpu_has_native_bf16

TREES = ((2, 4, 8), (3, 4, 12), (4, 4, 16), (4, 5, 20), (4, 6, 24), (6, 5, 30), (6, 6, 40),
         (8, 6, 48), (4, 8, 32))


@dataclass(frozen=True)
class Setting:
    dtype: str
    threads: int
    tree: tuple[int, int, int]
    policy: str


@dataclass(frozen=True)
class Measured:
    setting: Setting
    tokens: int
    rounds: int
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def mat(self) -> float:
        return self.tokens / max(1, self.rounds)


def one_pass(engine: Any, prompts: list[Prompt], setting: Setting, max_new: int,
             temperature: float = 0.0) -> Measured:
    torch.set_num_threads(setting.threads)
    tokens = rounds = 0
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        params = SamplingParams(max_new_tokens=max_new, temperature=temperature,
                                seed=i if temperature > 0 else None)
        ids, stats = engine.generate_ids(p.ids, params, setting.policy)
        tokens, rounds = tokens + len(ids), rounds + stats.rounds
    return Measured(setting, tokens, rounds, time.perf_counter() - start)


def measure(jobs: list[tuple[Any, Setting]], prompts: list[Prompt], max_new: int,
            repeats: int = 1, temperature: float = 0.0) -> list[Measured]:
    """Each (engine, setting)'s fastest of `repeats` passes over the prompts. Greedy passes
    commit the same tokens in the same rounds, so only the wall time varies; the passes are
    interleaved (pass r of every setting before pass r + 1 of any) because this VM's speed
    drifts: one setting measured 18.5 and 25.4 tokens/s ten minutes apart in one run."""
    for engine, setting in jobs:  # warm-up
        torch.set_num_threads(setting.threads)
        engine.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=4), setting.policy)
    fastest: list[Measured | None] = [None] * len(jobs)
    for _ in range(repeats):
        for i, (engine, setting) in enumerate(jobs):
            m = one_pass(engine, prompts, setting, max_new, temperature)
            print(_line(m), flush=True)
            best_so_far = fastest[i]
            if best_so_far is None or m.wall_s < best_so_far.wall_s:
                fastest[i] = m
    return [m for m in fastest if m is not None]


def open_engine(pool: Path, dtype: str, tree: tuple[int, int, int]) -> Any:
    # The acceptance loss (drafting every round): the sweeps compare what each setting does to
    # drafting, which the served time loss could turn off for a learned policy.
    config = EngineConfig(dtype=dtype, tree=tree_config(tree), max_context=4096,
                          selector=replace(served_selector("cpu"), loss="length"))
    return SpecEngine.from_pool_file(pool, config)


def tree_config(tree: tuple[int, int, int]) -> TreeConfig:
    top_k, depth, total = tree
    return TreeConfig(top_k=top_k, depth=depth, total_tokens=total)


def precision_sweep(args: argparse.Namespace, prompts: list[Prompt]) -> list[Measured]:
    tree = astuple_tree(served_tree("cpu"))
    dtypes = ["float32", "bfloat16"] if cpu_has_native_bf16() else ["float32"]
    jobs = []
    for dtype in dtypes:
        engine = open_engine(args.pool, dtype, tree)
        jobs += [(engine, Setting(dtype, threads, tree, policy))
                 for threads in (1, 2) for policy in ("none", "fixed:generalist")]
    return measure(jobs, prompts, args.max_new, args.repeats)


def tree_sweep(args: argparse.Namespace, prompts: list[Prompt], dtype: str,
               threads: int) -> list[Measured]:
    """The generalist at every tree, and plain decoding beside them (its own speed-up base:
    the precision sweep's plain was measured minutes earlier). The engines share one target."""
    trees = TREES[:2] if args.quick else TREES
    base = open_engine(args.pool, dtype, trees[0])
    jobs: list[tuple[Any, Setting]] = [(base, Setting(dtype, threads, trees[0], "none"))]
    for tree in trees:
        config = replace(base.config, tree=tree_config(tree))
        engine = SpecEngine(base.target, dict(base.snapshot.drafters), config)
        jobs.append((engine, Setting(dtype, threads, tree, args.policy)))
    return measure(jobs, prompts, args.max_new, args.repeats, args.temperature)


def astuple_tree(tree: TreeConfig) -> tuple[int, int, int]:
    return (tree.top_k, tree.depth, tree.total_tokens)


def _line(m: Measured) -> str:
    s = m.setting
    return (f"{s.dtype:>9} threads={s.threads} tree={s.tree} {s.policy:>17}: "
            f"{m.tokens_per_s:6.2f} tok/s MAT {m.mat:.2f}")


def best(rows: list[Measured], policy: str) -> Measured:
    return max((r for r in rows if r.setting.policy == policy), key=lambda r: r.tokens_per_s)


def render(first: list[Measured], second: list[Measured], meta: dict[str, Any]) -> str:
    policy, temperature = meta.get("policy", "fixed:generalist"), meta.get("temperature", 0.0)
    decoding = "greedy" if not temperature else f"temperature {temperature:g}, prompt i seed i"
    lines = [
        "# CPU defaults by measurement" if not temperature
        else f"# Draft trees when sampling on a CPU ({policy})", "",
        f"`python -m bench.speed.cpu_defaults{meta.get('flags', '')}` on {meta['machine']}; "
        f"{meta['prompts']} held-out prompts (one per domain), {decoding}, up to "
        f"{meta['max_new']} new tokens each, shipped demo pool "
        f"(SmolLM2-135M-Instruct + {policy}). Tokens/s are wall-clock over all prompts, "
        f"prefill included, measured side by side in one run, the fastest of {meta['repeats']} "
        "passes per setting.", "",
    ]
    if first:
        lines += _precision_table(first)
    plain = {(r.setting.dtype, r.setting.threads): r.tokens_per_s for r in first
             if r.setting.policy == "none"}
    plain_beside = [r for r in second if r.setting.policy == "none"]
    lines += [f"## Tree sweep ({second[0].setting.dtype}, {second[0].setting.threads} threads, "
              f"{policy})", ""]
    if plain_beside:
        lines += [f"Plain decoding measured beside the trees: {plain_beside[0].tokens_per_s:.2f} "
                  "tokens/s (the speed-up base below).", ""]
    lines += ["| top_k | depth | total_tokens | tokens/s | MAT | speed-up over plain |",
              "|---|---|---|---|---|---|"]
    for r in second:
        if r.setting.policy == "none":
            continue
        k, d, n = r.setting.tree
        base = (plain_beside[0].tokens_per_s if plain_beside
                else plain[(r.setting.dtype, r.setting.threads)])
        lines.append(f"| {k} | {d} | {n} | {r.tokens_per_s:.2f} | {r.mat:.2f} "
                     f"| {r.tokens_per_s / base:.2f}x |")
    win = best(second, policy)
    top_mat = max((r for r in second if r.setting.policy != "none"), key=lambda r: r.mat)
    lines += ["", f"Chosen: {meta['chosen']}.", ""] if meta.get("chosen") else [""]
    lines.append(f"Best tree {win.setting.tree}: {win.tokens_per_s:.2f} tokens/s, MAT "
                 f"{win.mat:.2f}. Highest MAT: {top_mat.mat:.2f} with {top_mat.setting.tree}.")
    return "\n".join(lines) + "\n"


def _precision_table(first: list[Measured]) -> list[str]:
    lines = ["## Precision and threads (default tree)", "",
             "| dtype | threads | policy | tokens/s | MAT | speed-up over plain |",
             "|---|---|---|---|---|---|"]
    plain = {(r.setting.dtype, r.setting.threads): r.tokens_per_s for r in first
             if r.setting.policy == "none"}
    for r in first:
        s = r.setting
        lines.append(f"| {s.dtype} | {s.threads} | {s.policy} | {r.tokens_per_s:.2f} | {r.mat:.2f} "
                     f"| {r.tokens_per_s / plain[(s.dtype, s.threads)]:.2f}x |")
    return lines + [""]


def plot(second: list[Measured], path: Path, policy: str = "fixed:generalist",
         temperature: float = 0.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    trees = [r for r in second if r.setting.policy != "none"]
    labels = ["/".join(map(str, r.setting.tree)) for r in trees]
    ax.bar(labels, [r.tokens_per_s for r in trees], color="#4c72b0")
    for r in second:
        if r.setting.policy == "none":
            ax.axhline(r.tokens_per_s, color="#c44e52", linestyle="--", label="plain decoding")
            ax.legend()
    ax.set_xlabel("tree top_k / depth / total_tokens")
    ax.set_ylabel(f"{policy} tokens/s")
    decoding = "greedy" if not temperature else f"temperature {temperature:g}"
    ax.set_title(f"Draft tree sweep on CPU (SmolLM2-135M, {decoding})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="passes per setting (fastest kept)")
    ap.add_argument("--quick", action="store_true", help="two trees, 8 tokens: a smoke test")
    ap.add_argument("--trees-only", action="store_true",
                    help="the tree sweep alone, at the auto dtype and 2 threads")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--policy", default="fixed:generalist", help="the speculative policy swept")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.max_new, args.repeats = 8, 1
    probe = SpecEngine.from_pool_file(args.pool, EngineConfig(max_context=4096))
    prompts = load_prompts(args.pool, probe.tokenizer, args.per_domain, 200)
    del probe
    first = [] if args.trees_only else precision_sweep(args, prompts)
    top = (Setting(auto_dtype(), 2, astuple_tree(served_tree("cpu")), args.policy)
           if args.trees_only else best(first, "fixed:generalist").setting)
    second = tree_sweep(args, prompts, top.dtype, top.threads)
    win = best(second, args.policy).setting
    meta = {"machine": describe_machine(),
            "prompts": len(prompts), "max_new": args.max_new, "repeats": args.repeats,
            "policy": args.policy, "temperature": args.temperature, "flags": _flags(args),
            "chosen": (None if args.trees_only
                       else f"dtype {top.dtype}, {top.threads} threads, tree {win.tree}")}
    stem = "cpu_defaults" if not args.trees_only else f"cpu_defaults_t{args.temperature:g}"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(m.setting), "tokens": m.tokens, "rounds": m.rounds, "wall_s": m.wall_s,
             "tokens_per_s": m.tokens_per_s, "mat": m.mat} for m in first + second]
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1)
                                           + "\n")
    (args.out / f"{stem}.md").write_text(render(first, second, meta))
    plot(second, args.out / f"{stem}.png", args.policy, args.temperature)
    print(render(first, second, meta))


def _flags(args: argparse.Namespace) -> str:
    """The command line of a run that is not the default sweep."""
    if not args.trees_only:
        return ""
    return f" --trees-only --temperature {args.temperature:g} --policy {args.policy}"


if __name__ == "__main__":
    main()
