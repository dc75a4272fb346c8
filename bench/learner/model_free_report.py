"""Markdown, JSON and the PNG of bench/learner/model_free_bench.py (model_free.{md,json,png})."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt

from bench.learner.model_free_methods import EAGLE_ONLY, HYBRID, WHOLE_POOL, WORKLOADS

TITLES = {"held_out": "held-out prompts, seven domains interleaved",
          "copy_heavy": "copy-heavy (bench/data/copy_heavy.jsonl), kinds interleaved"}
MEANING = {
    "plain": "plain decoding (policy none); both passes pooled",
    "router": "the pool's prompt router picks one EAGLE-3 drafter per request",
    EAGLE_ONLY: "HedgeSpec (NormalHedge) over the EAGLE-3 drafters only",
    WHOLE_POOL: "HedgeSpec (NormalHedge) over EAGLE-3 + model-free drafters",
    HYBRID: "the same, the ngram member's chain grafted at the root of every EAGLE-3 tree",
    "oracle": "per request, the best fixed drafter of the whole pool by MAT (hindsight)",
}


def write_report(r: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in r.items() if not k.startswith("_")}
    (out / "model_free.json").write_text(json.dumps(public, indent=2, default=str) + "\n")
    (out / "model_free.md").write_text(markdown(r))
    plot(r, out / "model_free.png")


def meaning(name: str, r: dict[str, Any]) -> str:
    if name in MEANING:
        return MEANING[name]
    did = name.removeprefix("fixed:")
    free = r["config"]["model_free"].get(did)
    if free is not None:
        params = ", ".join(f"{k}={v}" for k, v in free["params"].items())
        return f"{free['kind']} drafter alone (no weights; {params})"
    return f"EAGLE-3 drafter `{did}` alone"


def _header(r: dict[str, Any]) -> list[str]:
    c, w = r["config"], r["workloads"]
    h, cp = w["held_out"], w["copy_heavy"]
    free = ", ".join(f"{k} ({v['kind']})" for k, v in c["model_free"].items())
    return [
        "# Model-free drafters beside the EAGLE-3 pool (issue 39, item 6)", "",
        f"`{c['command']}` on {c['date']}: {c['machine']}; {c['dtype']}, {c['threads']} torch "
        f"thread(s), torch {c['torch']}; pool `{c['pool']}` (EAGLE-3: {', '.join(c['eagle'])}; "
        f"model-free: {free}; "
        f"router: {'yes' if c['router'] else 'no'}); tree (top_k, depth, total) "
        f"{tuple(c['tree'])}, evaluation every {c['eval_every']} rounds, {c['prompt_windows']} "
        f"prompt windows. Whole run {r['elapsed_s'] / 60:.1f} min.", "",
        f"Sizes: held-out {h['prompts']} prompts ({c['per_domain']} per domain, cut to "
        f"{c['max_prompt_tokens']} tokens) x {h['max_new_tokens']} new tokens; copy-heavy "
        f"{cp['prompts']} prompts ({c['copy_per_kind']} per kind: {', '.join(cp['kinds'])}) x "
        f"{cp['max_new_tokens']} new tokens; requests stop at EOS as served."
        + (" **--quick: a smoke run, its figures mean nothing.**" if "--quick" in c["command"]
           else ""), "",
        "Method: every row runs the same prompts one request at a time, in one run; tokens/s = "
        "all tokens / all wall time (prefill included, as served; the column \"prefill left "
        "out\" divides the tokens after the first by the time after the first token, which "
        "matters on the copy-heavy prompts of 180-610 tokens). MAT = tokens committed per "
        "target verification pass (bonus included). Learners live per request and, in the "
        "one-stream rows, minimise the acceptance loss (they draft every round). **Every method "
        "starts with fresh model-free drafters** (a new SuffixDrafter and NgramDrafter per "
        "method and per pass of the stream rows): the suffix cache warms up only on the "
        "method's own earlier requests, never on another method's. The oracle's tokens/s is "
        "that of the runs it picks.", "",
    ]


def _noise(r: dict[str, Any]) -> list[str]:
    parts = []
    for name in WORKLOADS:
        w = r["workloads"][name]
        a, b = w["plain_passes"]
        parts.append(f"{name} {a:.1f} / {b:.1f} tokens/s ({w['plain_spread']:.0%} apart)")
    return ["Run-to-run noise: plain decoding ran first and last in each workload's greedy "
            "block: " + "; ".join(parts) + ". Its row pools both passes; a ratio within that "
            "spread of its threshold is not a clear result either way.", ""]


def _rows(r: dict[str, Any], name: str) -> list[str]:
    w = r["workloads"][name]
    lines = [f"## Greedy, one stream: {TITLES[name]}", "",
             "| row | MAT | tokens/s | x plain | x HedgeSpec EAGLE-only | MAT x oracle | "
             "x plain, prefill left out | what |",
             "|---|---|---|---|---|---|---|---|"]
    for row, s in w["methods"].items():
        bold = "**" if row == WHOLE_POOL else ""
        lines.append(f"| {bold}{row}{bold} | {s['mat']:.2f} | {s['tokens_per_s']:.1f} | "
                     f"{s['x_plain']:.2f} | {s['x_hedgespec_eagle']:.2f} | "
                     f"{s['mat_x_oracle']:.2f} | {s['x_plain_decode']:.2f} | "
                     f"{meaning(row, r)} |")
    share = w["drafter_share"]
    for key in (WHOLE_POOL, EAGLE_ONLY, HYBRID):
        top = ", ".join(f"{d} {v:.0%}" for d, v in list(share[key].items())[:6])
        lines += ["", f"{key}: share of rounds drafted by each drafter: {top or 'none'}."]
    kinds = w["per_kind_mat"]
    cols = list(next(iter(kinds.values()))) if kinds else []
    lines += ["", f"MAT per {'domain' if name == 'held_out' else 'kind'}:", "",
              "| " + ("domain" if name == "held_out" else "kind") + " | " + " | ".join(cols)
              + " |", "|---|" + "---|" * len(cols)]
    for k, row in kinds.items():
        lines.append(f"| {k} | " + " | ".join(f"{row[c]:.2f}" for c in cols) + " |")
    return lines + [""]


def _sampling(r: dict[str, Any]) -> list[str]:
    s = r["sampling"]
    lines = [f"## Default sampling (temperature {s['temperature']}, top_p {s['top_p']}; prompt "
             "i seeded with i for every row)", "",
             "| workload | row | MAT | tokens/s | x plain | x HedgeSpec EAGLE-only |",
             "|---|---|---|---|---|---|"]
    for name in WORKLOADS:
        for row, m in s[name].items():
            lines.append(f"| {name} | {row} | {m['mat']:.2f} | {m['tokens_per_s']:.1f} | "
                         f"{m['x_plain']:.2f} | {m['x_hedgespec_eagle']:.2f} |")
    return lines + [""]


def _streams(r: dict[str, Any]) -> list[str]:
    first = r["streams"][WORKLOADS[0]]
    lines = [f"## {first['streams']} concurrent streams (batched steps, the time loss)", "",
             f"{first['streams']} requests started together (the workload's first prompts, "
             f"cycled), greedy, {first['max_new_tokens']} tokens each (ignore_eos); plain "
             "decoding (policy none) vs HedgeSpec over the whole pool with the time loss (the "
             "served default: plain decoding an extra arm of each request's learner), on one "
             "engine, in the order plain, HedgeSpec, HedgeSpec, plain; "
             "each mode's tokens/s is the mean of its two passes. Before them, "
             f"{first['warmup_groups']} groups of the same streams ran (as on a server that has "
             "been up): the last column says whether the time loss's cost model "
             "(core/selection/arm_costs.py) had fitted this batch size by then.", "",
             "| workload | plain tokens/s (passes) | HedgeSpec time loss tokens/s (passes) "
             "| x plain | MAT of speculative steps | plain steps (time loss) | cost model |",
             "|---|---|---|---|---|---|---|"]
    for name in WORKLOADS:
        st = r["streams"][name]
        p, h = st["passes"]["plain"], st["passes"][WHOLE_POOL]
        mat = sum(c["mat"] for c in h) / len(h)
        plain = sum(c["plain_step_share"] for c in h) / len(h)
        lines.append(
            f"| {name} | {st['tokens_per_s']['plain']:.1f} ("
            + " / ".join(f"{c['tokens_per_s']:.1f}" for c in p) + f") | "
            f"{st['tokens_per_s'][WHOLE_POOL]:.1f} ("
            + " / ".join(f"{c['tokens_per_s']:.1f}" for c in h) + f") | {st['x_plain']:.2f} | "
            f"{mat:.2f} | {plain:.0%} | {st['time_model']} |")
    return lines + [""]


def _targets(r: dict[str, Any]) -> list[str]:
    lines = ["## Targets (issue 39)", "", "| target | measured | threshold | |",
             "|---|---|---|---|"]
    for name, t in r["targets"].items():
        lines.append(f"| {name} | {t['value']:.2f} | {t['threshold']} | "
                     f"{'met' if t['met'] else '**missed**'} |")
    return lines + [""]


def markdown(r: dict[str, Any]) -> str:
    sections = (_header(r), _noise(r), _targets(r), *(_rows(r, n) for n in WORKLOADS),
                _sampling(r), _streams(r),
                ["Plot: `model_free.png` (tokens/s x plain per row, per workload).", ""])
    return "\n".join(line for section in sections for line in section)


def plot(r: dict[str, Any], path: Path) -> None:
    rows = list(r["workloads"][WORKLOADS[0]]["methods"])
    fig, ax = plt.subplots(figsize=(max(8.0, 0.6 * len(rows) + 2), 4.5))
    width = 0.8 / len(WORKLOADS)
    for i, name in enumerate(WORKLOADS):
        methods = r["workloads"][name]["methods"]
        ax.bar([x + i * width for x in range(len(rows))],
               [methods[row]["x_plain"] if row in methods else 0.0 for row in rows], width,
               label=name.replace("_", "-"))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([x + width * (len(WORKLOADS) - 1) / 2 for x in range(len(rows))], rows,
                  rotation=45, ha="right", fontsize=8)
    ax.set(ylabel="tokens/s x plain", title="Greedy, one stream: tokens/s against plain decoding")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
