"""HedgeSpec with feedback from the prompt's tail (SelectorConfig.prompt_windows) against the
learner starting uniform, the generalist, the router and the per-request oracle, side by side.

    python -m bench.learner.prompt_windows [--quick] [--pool demo/pool/pool.json] [--threads 2]
                                   [--per-domain 3] [--max-new-tokens 48]
                                   [--windows 0,16,48] [--workloads held-out,mismatched]

One engine (the served selector, NormalHedge and the CPU's eval_every, with the acceptance loss
pinned: it drafts every round) runs every drafter alone
(for the generalist and the per-request oracle), then HedgeSpec once per prompt-window count W
(W = 0: the learner starts uniform, as before prompt windows) and, for W > 0, once per form of
the evidence (SelectorConfig.prompt_evidence: "prior", the default, and "losses", the form
before issue 40), greedy. Two workloads: the held-out prompts of every domain interleaved, and
"mismatched": the same texts wrapped in an instruction whose answer is of another domain (code
to be explained in prose, a medical text turned into SQL, ...; the text comes last, so the
prompt's tail is of the text's domain and the answer is not). Also reported: how often
HedgeSpec's first round already used the request's best fixed drafter (the oracle's pick).
Writes bench/results/prompt_windows.{md,json,png}. MAT does not depend on the machine's speed
or load; tokens/s do (in the JSON only: the table reads MAT).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench.learner.hedgespec_bench import Run, oracle_runs, run_method, summarize, variant
from bench.learner.hedgespec_run import generalist_id
from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, chat_ids, load_prompts
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.decoding import prompt_feedback
from core.engine import SpecEngine
from core.model.precision import auto_dtype, cpu_has_native_bf16

# The mismatched workload: each domain's text under an instruction whose answer is of another
# domain. The text comes last, so the prompt's tail is the text's domain.
MISMATCH = {
    "python": "Explain in plain English, without writing any code, what this code does:",
    "sql": "Describe in plain English which data this SQL query returns and why:",
    "medical": "Write SQL CREATE TABLE statements for the entities in this text:",
    "news": "Write a Python function that returns the names of the people in this article:",
    "math": "Write a short news report about a student who solved this problem:",
    "biology": "Write a Python class that models the concepts in this text:",
    "chemistry": "Write an SQL query over a table compounds(name, formula, mass) for this text:",
}


def mismatched(prompts: list[Prompt], tokenizer: Any, pool_json: Path) -> list[Prompt]:
    """The held-out texts under MISMATCH's instructions (other domains' texts: a generic one)."""
    path = pool_json.parent / "eval_prompts.jsonl"
    text = {r["id"]: r["prompt"] for r in map(json.loads, path.read_text().splitlines())
            if r.get("id")}
    out = []
    for p in prompts:
        instruction = MISMATCH.get(p.domain, "Summarise this in one sentence of plain prose:")
        body = tokenizer.decode(tokenizer(text[p.id])["input_ids"][:140])
        out.append(Prompt(p.id, p.domain, chat_ids(tokenizer, f"{instruction}\n\n{body}", 180)))
    return out


def measure(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    # The acceptance loss (drafting every round): the rows are compared on the drafters their
    # learners pick, so no learner may decode plain instead (the served time loss could).
    config = EngineConfig(max_context=4096, dtype=args.dtype, tree=served_tree("cpu"),
                          selector=replace(served_selector("cpu"), loss="length"))
    engine = SpecEngine.from_pool_file(args.pool, config)
    held_out = load_prompts(args.pool, engine.tokenizer, args.per_domain, 160)
    engine.generate_ids(held_out[0].ids, SamplingParams(max_new_tokens=8))  # warm-up
    workloads = {"held-out": held_out,
                 "mismatched": mismatched(held_out, engine.tokenizer, args.pool)}
    out = {}
    for name in args.workloads:
        log(f"workload {name}")
        out[name] = measure_workload(engine, workloads[name], args, log)
    return {"workloads": out, "prompts": len(held_out),
            "domains": sorted({p.domain for p in held_out})}


def measure_workload(engine: SpecEngine, prompts: list[Prompt], args: argparse.Namespace,
                     log: Any) -> dict[str, Any]:
    gen = generalist_id(args.pool, engine.drafter_ids())
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
        for form, mix in _forms(w, args.prior_mixes):
            eng = variant(engine, prompt_windows=w, prompt_evidence=form)
            name = f"hedgespec W={w}" + (f" {form}" if form == "losses" else "") + (
                f" prior {mix}" if mix != prompt_feedback.PROMPT_PRIOR_MIX else "")
            with prior_mix(mix):
                runs = timed(log, name, lambda eng=eng: run_method(
                    eng, prompts, "hedgespec", "normalhedge", args.max_new_tokens))
            rows[name] = {**row(runs, w, _hits(runs, best)), "form": form if w else None,
                          "prior_mix": mix if w and form == "prior" else None}
    return {"rows": rows}


def _forms(windows: int, mixes: list[float]) -> list[tuple[str, float]]:
    """(evidence form, prior mix) to run at W = windows: the losses form once, the prior form
    at each mix (the served one first); W = 0 has no evidence."""
    served = prompt_feedback.PROMPT_PRIOR_MIX
    if not windows:
        return [("prior", served)]
    ordered = [served] + [m for m in mixes if m != served]
    return [("prior", m) for m in ordered] + [("losses", served)]


@contextmanager
def prior_mix(mix: float) -> Iterator[None]:
    """core.decoding.prompt_feedback.PROMPT_PRIOR_MIX set to `mix` for the runs inside."""
    served = prompt_feedback.PROMPT_PRIOR_MIX
    prompt_feedback.PROMPT_PRIOR_MIX = mix
    try:
        yield
    finally:
        prompt_feedback.PROMPT_PRIOR_MIX = served


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
    lines = [
        "# HedgeSpec with feedback from the prompt's tail", "",
        f"`{meta['command']}` on {meta['machine']}; {meta['dtype']}, {meta['threads']} "
        f"thread(s); {results['prompts']} prompts a workload ({len(results['domains'])} domains "
        f"interleaved), {meta['max_new']} new tokens each, greedy; served selector (NormalHedge, "
        f"eval_every {meta['eval_every']}). W = prompt positions scored before the first round "
        "(0: the learner starts uniform); the evidence enters as a prior (default) or as "
        "full-weight losses (`losses`, the form before issue 40). `mismatched`: the same texts "
        "under an instruction whose answer is of another domain "
        "(bench/learner/prompt_windows.MISMATCH). "
        "First round on the best = share of requests whose first round used the drafter that "
        "was best for that request alone (the oracle's pick). MAT = tokens after the first / "
        "rounds; it does not depend on the machine's speed (tokens/s are in the JSON).",
    ]
    for workload, res in results["workloads"].items():
        rows = res["rows"]
        gen, oracle = rows["generalist"]["mat"], rows["oracle"]["mat"]
        lines += ["", f"## {workload}", "",
                  "| method | MAT | x generalist | x oracle | first round on the best |",
                  "|---|---|---|---|---|"]
        for name, r in rows.items():
            hits = "" if r["first_round_best"] is None else f"{r['first_round_best']:.0%}"
            lines.append(f"| {name} | {r['mat']:.3f} | {r['mat'] / gen:.3f} | "
                         f"{r['mat'] / oracle:.3f} | {hits} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = results["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(6.5 * len(workloads), 3.5),
                             squeeze=False)
    for ax, (workload, res) in zip(axes[0], workloads.items(), strict=True):
        rows = res["rows"]
        for form, marker in (("prior", "o"), ("losses", "s")):
            sweep = [(r["windows"], r["mat"]) for r in rows.values()
                     if r["windows"] is not None and r.get("form") in (form, None)
                     and r.get("prior_mix") in (prompt_feedback.PROMPT_PRIOR_MIX, None)]
            ax.plot([w for w, _ in sweep], [m for _, m in sweep], marker=marker,
                    label=f"HedgeSpec, evidence as {form}")
        for name, style in (("oracle", "--"), ("generalist", ":"), ("router", "-.")):
            if name in rows:
                ax.axhline(rows[name]["mat"], linestyle=style, color="grey", label=name)
        ax.set_xlabel("prompt windows W")
        ax.set_ylabel("MAT")
        ax.set_title(f"{workload} (SmolLM2-135M pool)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--windows", default="0,16,48")
    ap.add_argument("--workloads", default="held-out,mismatched")
    ap.add_argument("--prior-mixes", default="",
                    help="more PROMPT_PRIOR_MIX values to run the prior form at (comma-separated)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="1 prompt a domain, 16 tokens, W 0 and 16")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.per_domain, args.max_new_tokens, args.windows = 1, 16, "0,16"
    args.windows = [int(w) for w in args.windows.split(",")]
    args.workloads = args.workloads.split(",")
    args.prior_mixes = [float(m) for m in args.prior_mixes.split(",") if m]
    args.dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    results = measure(args, lambda msg: print(msg, flush=True))
    meta = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                       f"visible, native bf16: {cpu_has_native_bf16()}",
            "dtype": args.dtype, "threads": args.threads, "max_new": args.max_new_tokens,
            "eval_every": served_selector("cpu").eval_every,
            "command": ("python -m bench.learner.prompt_windows"
                        + (" --quick" if args.quick else ""))}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "prompt_windows.json").write_text(
        json.dumps({"meta": meta, **results}, indent=1) + "\n")
    (args.out / "prompt_windows.md").write_text(render(results, meta))
    plot(results, args.out / "prompt_windows.png")
    print(render(results, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
