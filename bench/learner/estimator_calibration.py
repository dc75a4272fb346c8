"""The estimator's ÂL against the tokens rounds realised, greedy and sampled (issue 40, A).

    python -m bench.learner.estimator_calibration [--per-domain 3] [--max-new-tokens 64]

HedgeSpec (NormalHedge, the served tree and evaluation period) decodes held-out prompts of
every domain on the demo pool at each temperature. For each completed round window it records
the chosen drafter's ÂL under the "tree" estimator (1 + Σ_k Π_{j<k} 1{x_j ∈ C_j} γ_k,
core/selection/counterfactual.tree_length), the paper's product along the path on the same γ
(1 + Σ_k Π_{j≤k} γ_j, what "tree" computed before), and the tokens the round committed.
ÂL is a one-step counterfactual (the evaluation models deeper levels from the catch-up, the
real tree drafts them from the drafter's own features), so neither form is expected to match
the realised mean exactly; the bias table shows how far each is. Writes
bench/results/estimator_calibration.{md,json,png}. Timing plays no part: the figures do not
depend on the machine's speed or load.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, load_prompts
from core.config import (
    EngineConfig,
    SamplingParams,
    SelectorConfig,
    default_eval_every,
    served_tree,
)
from core.decoding.request import RequestState
from core.engine import SpecEngine
from core.selection.counterfactual import estimate_length
from core.selection.feedback import Window


@dataclass
class Sample:
    temperature: float
    tree: float  # ÂL, the chosen drafter, as the learner now gets it
    paper: float  # 1 + Σ_k Π_{j≤k} γ_j on the same window's γ
    realised: int


@contextmanager
def recorded(samples: list[Sample], temperature: float) -> Iterator[None]:
    """Every completed (uncensored) round window of the chosen drafter while inside."""
    original = RequestState.record

    def record(self: RequestState, windows: list[Window]) -> None:
        for w in windows:
            if w.realised is not None and w.chosen is not None and not w.censored:
                samples.append(Sample(temperature, float(w.est_len[w.chosen]),
                                      float(estimate_length(w.gammas[w.chosen])), w.realised))
        original(self, windows)

    RequestState.record = record  # type: ignore[method-assign]
    try:
        yield
    finally:
        RequestState.record = original  # type: ignore[method-assign]


def summary(samples: list[Sample]) -> dict[str, float]:
    realised = np.array([s.realised for s in samples], dtype=float)
    out: dict[str, float] = {"windows": float(len(samples)), "realised": float(realised.mean())}
    for form in ("tree", "paper"):
        est = np.array([getattr(s, form) for s in samples])
        out[f"{form}_mean"] = float(est.mean())
        out[f"{form}_bias"] = float(est.mean() - realised.mean())
        out[f"{form}_mae"] = float(np.abs(est - realised).mean())
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    tree = served_tree("cpu")
    selector = SelectorConfig(eval_every=default_eval_every("cpu"), estimator="tree")
    config = EngineConfig(tree=tree, max_context=4096, dtype="float32", selector=selector)
    engine = SpecEngine.from_pool_file(args.pool, config)
    prompts = load_prompts(args.pool, engine.tokenizer, args.per_domain, 160)
    samples: list[Sample] = []
    for temperature in args.temperatures:
        with recorded(samples, temperature):
            for i, p in enumerate(prompts):
                params = SamplingParams(max_new_tokens=args.max_new_tokens,
                                        temperature=temperature, seed=i)
                engine.generate_ids(p.ids, params, "normalhedge")
        print(f"T={temperature}: {summary([s for s in samples if s.temperature == temperature])}",
              flush=True)
    return {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
            "tree": asdict(tree), "summary": {str(t): summary([s for s in samples
                                                               if s.temperature == t])
                                              for t in args.temperatures},
            "samples": [asdict(s) for s in samples]}


def report(r: dict[str, Any]) -> str:
    lines = ["# Estimator calibration: ÂL of the chosen drafter against realised tokens",
             "", f"HedgeSpec (NormalHedge, `tree` estimator) on the demo pool, {r['prompts']} "
             f"held-out prompts (all seven domains), {r['max_new_tokens']} new tokens, tree "
             f"{r['tree']}, fp32. One row per temperature; every completed round window of the "
             "chosen drafter. `tree`: 1 + Σ_k Π_{j<k} 1{x_j ∈ C_j} γ_k (what the learner gets); "
             "`paper`: 1 + Σ_k Π_{j≤k} γ_j on the same γ (what `tree` computed before issue 40).",
             "", "| T | windows | realised | ÂL tree | bias tree | MAE tree | ÂL paper | "
             "bias paper | MAE paper |", "|---|---|---|---|---|---|---|---|---|"]
    for t, s in r["summary"].items():
        lines.append(f"| {t} | {int(s['windows'])} | {s['realised']:.2f} | {s['tree_mean']:.2f}"
                     f" | {s['tree_bias']:+.2f} | {s['tree_mae']:.2f} | {s['paper_mean']:.2f} | "
                     f"{s['paper_bias']:+.2f} | {s['paper_mae']:.2f} |")
    sampled = {t: s for t, s in r["summary"].items() if float(t) > 0}
    gaps = ", ".join(f"{s['tree_mean'] - s['paper_mean']:+.3f} at T = {t}"
                     for t, s in sampled.items())
    lines += ["", "Greedy: the two forms are equal by construction (γ is the indicator). Under "
              f"sampling `tree` minus `paper` is {gaps or 'not measured'} tokens a round: the "
              "double count the paper's product makes along the realised path. The bias that "
              "remains in both is the one-step model's (deeper levels modelled from the "
              "catch-up, not drafted from the drafter's own features), the same at T = 0 where "
              "the forms coincide. The Monte Carlo test over realised trajectories of the real "
              "verifier (tests/core/speculation/test_tree_estimator.py) pins that `tree` is "
              "unbiased for "
              "the process it models. Plot: `estimator_calibration.png`."]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, len(r["summary"]), figsize=(5 * len(r["summary"]), 4),
                             squeeze=False)
    for ax, (t, _) in zip(axes[0], r["summary"].items(), strict=True):
        rows = [s for s in r["samples"] if str(s["temperature"]) == t]
        for form, colour in (("tree", "#2563eb"), ("paper", "#9ca3af")):
            est = np.array([s[form] for s in rows])
            real = np.array([s["realised"] for s in rows])
            bins = np.round(est)
            xs = sorted(set(bins.tolist()))
            ax.plot(xs, [real[bins == x].mean() for x in xs], "o-", color=colour, label=form)
        top = max(s["realised"] for s in rows) + 0.5
        ax.plot([1, top], [1, top], ":", color="black", label="calibrated")
        ax.set_title(f"T = {t}")
        ax.set_xlabel("ÂL of the chosen drafter (rounded)")
        ax.set_ylabel("mean realised tokens per round")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.learner.estimator_calibration")
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")],
                    default=[0.0, 0.2, 1.0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    r = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "estimator_calibration.json").write_text(json.dumps(r, indent=1) + "\n")
    (args.out / "estimator_calibration.md").write_text(report(r))
    plot(r, args.out / "estimator_calibration.png")


if __name__ == "__main__":
    main()
