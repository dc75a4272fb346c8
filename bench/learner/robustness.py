"""Router robustness, the HedgeSpec paper's experiment in miniature (issue 14, item 3).

A static router (core/selection/router.py, trained by demo/router.py on the domains' training
prompts) against online learning, side by side in one run on three workloads:

  clean    held-out prompts of the seven domains, interleaved domain by domain;
  wrapped  the same prompts inside instructions the pool never saw, interleaved;
  ood      HumanEval prompts (demo/data/ood/humaneval.jsonl), a domain no drafter trained on.

Methods: the generalist, the router (its drafter fixed per request), HedgeSpec (NormalHedge,
a fresh learner per request), HedgeSpec started from the router's probabilities as its prior
(policy normalhedge_router: where the router is wrong, the prior is, and the learner must
recover) and the per-request oracle (the best drafter in hindsight among every fixed drafter's
runs). Greedy decoding, so every method emits the same text and only the
number of target passes differs. Writes bench/results/robustness.{md,json,png}.

    python -m bench.learner.robustness [--per-domain 2] [--ood 6] [--max-new-tokens 48]
                                       [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench.learner.hedgespec_bench import Run, oracle_runs, run_method, summarize
from bench.learner.hedgespec_run import generalist_id
from bench.machine import repo_path
from bench.paths import REPO, RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, chat_ids
from core.config import ROUTER_PRIOR, EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype
from demo.records import load_records

OOD_FILE = REPO / "demo" / "data" / "ood" / "humaneval.jsonl"
# Instructions no training prompt carries (the router's features shift, the text's domain not).
WRAPPERS = (
    "You are a careful assistant. Restate the task in one sentence first, then solve it.\n\n"
    "Task: {p}",
    "{p}\n\nKeep the answer short and end with a one-line summary for a busy manager.",
    "A colleague forwarded this and asked for your take, informally:\n---\n{p}\n---",
)
METHODS = ("generalist", "router", "hedgespec", "hedgespec_router", "oracle")


def eval_rows(pool_json: Path, per_domain: int) -> list[dict[str, str]]:
    """The pool's first `per_domain` held-out prompts per domain, interleaved."""
    rows = [json.loads(line)
            for line in (pool_json.parent / "eval_prompts.jsonl").read_text().splitlines() if line]
    by_domain: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_domain.setdefault(r["domain"], []).append(r)
    return [rs[i] for i in range(per_domain) for _, rs in sorted(by_domain.items()) if i < len(rs)]


def workloads(pool_json: Path, tokenizer: Any, per_domain: int, ood: int,
              max_prompt: int) -> dict[str, list[Prompt]]:
    rows = eval_rows(pool_json, per_domain)
    clean = [Prompt(r["id"], r["domain"], chat_ids(tokenizer, r["prompt"], max_prompt))
             for r in rows]
    wrapped = []
    for i, r in enumerate(rows):
        text = tokenizer.decode(tokenizer(r["prompt"])["input_ids"][:max_prompt])
        wrapped.append(Prompt(r["id"], r["domain"],
                              chat_ids(tokenizer, WRAPPERS[i % len(WRAPPERS)].format(p=text),
                                                              max_prompt + 40)))
    humaneval = [Prompt(r.id, "ood_humaneval", chat_ids(tokenizer, r.prompt, max_prompt))
                 for r in load_records(OOD_FILE, "ood_humaneval")[:ood]]
    return {"clean": clean, "wrapped": wrapped, "ood": humaneval}


def measure(engine: SpecEngine, prompts: list[Prompt], gen: str, max_new: int,
            log: Any) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {}
    fixed = {d: run_method(engine, prompts, d, f"fixed:{d}", max_new) for d in engine.drafter_ids()}
    runs["generalist"] = fixed[gen]
    runs["router"] = run_method(engine, prompts, "router", "router", max_new)
    runs["hedgespec"] = run_method(engine, prompts, "hedgespec", "normalhedge", max_new)
    runs["hedgespec_router"] = run_method(engine, prompts, "hedgespec_router", ROUTER_PRIOR,
                                          max_new)
    runs["oracle"] = oracle_runs(fixed)
    log("   " + "  ".join(f"{m} {summarize(runs[m])['mat']:.2f}" for m in METHODS))
    return runs


def routed(engine: SpecEngine, prompts: list[Prompt]) -> list[str]:
    assert engine.router is not None
    return [engine.router.route(p.ids) for p in prompts]


def run_all(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    args.dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    # The acceptance loss (drafting every round): the methods are compared on the drafters
    # they pick, so no learner may decode plain instead (the served time loss could).
    config = EngineConfig(max_context=4096, dtype=args.dtype, tree=served_tree("cpu"),
                          selector=replace(served_selector("cpu"), loss="length"))
    engine = SpecEngine.from_pool_file(args.pool, config)
    if engine.router is None:
        raise SystemExit(f"{args.pool} names no router: run `python -m demo.router --pool "
                         f"{args.pool}`")
    gen = generalist_id(args.pool, engine.drafter_ids())
    sets = workloads(args.pool, engine.tokenizer, args.per_domain, args.ood, args.max_prompt_tokens)
    engine.generate_ids(sets["clean"][0].ids, SamplingParams(max_new_tokens=8))  # warm-up
    out: dict[str, Any] = {"workloads": {}}
    for name, prompts in sets.items():
        t0 = time.perf_counter()
        log(f"{name}: {len(prompts)} prompts")
        runs = measure(engine, prompts, gen, args.max_new_tokens, log)
        picks = routed(engine, prompts)
        out["workloads"][name] = {
            "prompts": len(prompts),
            "methods": {m: summarize(runs[m]) for m in METHODS},
            "router_accuracy": sum(p == q.domain
                                   for p, q in zip(picks, prompts, strict=True)) / len(prompts),
            "router_picks": {d: picks.count(d) for d in sorted(set(picks))},
            "seconds": time.perf_counter() - t0,
        }
    out["config"] = {"pool": repo_path(args.pool), "per_domain": args.per_domain, "ood": args.ood,
                     "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                     "dtype": args.dtype, "tree": engine.config.tree.__dict__, "decoding": "greedy",
                     "torch": torch.__version__}
    return out


def markdown(r: dict[str, Any]) -> str:
    cfg = r["config"]
    lines = [
        "# Router robustness: a static prompt router against HedgeSpec",
        "",
        "Generated by `python -m bench.learner.robustness` (see its docstring). Greedy decoding, "
        f"{cfg['max_new_tokens']} new tokens per prompt, tree {cfg['tree']}, {cfg['threads']} "
        f"threads, dtype {cfg['dtype']}; pool `{cfg['pool']}`. MAT = tokens committed per target "
        "pass; tok/s measured in the same run.",
        "",
        "| workload | prompts | router accuracy | generalist MAT | router MAT | HedgeSpec MAT | "
        "oracle MAT | HedgeSpec / router | HedgeSpec / oracle | router tok/s | HedgeSpec tok/s | "
        "HedgeSpec + router prior MAT | its / oracle |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, w in r["workloads"].items():
        m = w["methods"]
        acc = "n/a (no such drafter)" if name == "ood" else f"{w['router_accuracy']:.0%}"
        lines.append(
            f"| {name} | {w['prompts']} | {acc} | {m['generalist']['mat']:.2f} | "
            f"{m['router']['mat']:.2f} | {m['hedgespec']['mat']:.2f} | {m['oracle']['mat']:.2f} | "
            f"{m['hedgespec']['mat'] / m['router']['mat']:.3f}x | "
            f"{m['hedgespec']['mat'] / m['oracle']['mat']:.3f}x | "
            f"{m['router']['tokens_per_s']:.1f} | {m['hedgespec']['tokens_per_s']:.1f} | "
            f"{m['hedgespec_router']['mat']:.2f} | "
            f"{m['hedgespec_router']['mat'] / m['oracle']['mat']:.3f}x |"
        )
    lines += ["", "Router picks per workload: " + "; ".join(
        f"{name}: {w['router_picks']}" for name, w in r["workloads"].items()), ""]
    return "\n".join(lines)


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(r["workloads"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.16
    for k, m in enumerate(METHODS):
        ax.bar([i + (k - (len(METHODS) - 1) / 2) * width for i in range(len(names))],
               [r["workloads"][n]["methods"][m]["mat"] for n in names], width, label=m)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("MAT (tokens per target pass)")
    ax.set_title("Static router vs HedgeSpec")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.learner.robustness",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=2)
    ap.add_argument("--ood", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-prompt-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto", help="auto = what `hedgespec serve` picks here")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    r = run_all(args, lambda s: print(s, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "robustness.json").write_text(json.dumps(r, indent=2) + "\n")
    (args.out / "robustness.md").write_text(markdown(r))
    plot(r, args.out / "robustness.png")
    print(markdown(r))


if __name__ == "__main__":
    main()
