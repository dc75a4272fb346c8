"""Render `REPORT.md` from the report dictionary (every number comes from the build)."""

from __future__ import annotations

from typing import Any


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def mat_table(report: dict[str, Any]) -> str:
    """Drafters x domains, the in-domain cell in bold, plus each drafter's average."""
    domains, drafters = report["domains"], report["drafters"]
    rows = []
    for i, drafter in enumerate(drafters):
        cells = [
            f"**{v:.2f}**" if drafter == domain else f"{v:.2f}"
            for domain, v in zip(domains, report["mat"][i], strict=True)
        ]
        rows.append([drafter, *cells, f"{report['average'][i]:.2f}"])
    return _table(["drafter \\ domain", *domains, "average"], rows)


def checks_text(checks: dict[str, Any]) -> str:
    wins = checks["specialist_beats_generalist_in_domain"]
    beaten = [d for d, ok in wins.items() if ok]
    lines = [
        f"- Specialists beating the generalist on their own domain: {len(beaten)}/{len(wins)}"
        + ("" if len(beaten) == len(wins) else f" (not: {', '.join(d for d in wins if not wins[d])})"),
        f"- Average over domains: generalist {checks['generalist_average']:.3f}, "
        f"specialists {checks['specialists_average']:.3f} "
        f"({'generalist ahead' if checks['generalist_beats_specialists_on_average'] else 'generalist NOT ahead'})",
    ]
    return "\n".join(lines)


def build_text(build: dict[str, Any]) -> str:
    target, roll, cfg = build["target"], build["rollouts"], build["config"]
    rcfg, dcfg = cfg["rollouts"], cfg["drafter"]
    cached = set(build["cached_stages"])
    stage_rows = [
        [k + (" (reused from the stage cache)" if k in cached else ""), f"{v:.0f}"]
        for k, v in build["stage_seconds"].items()
    ]
    stage_rows.append(["**total**", f"**{build['total_seconds']:.0f}**"])
    loss_rows = [[d, f"{v:.3f}"] for d, v in target["heldout_loss"].items()]
    drafter_rows = [
        [k, str(v["steps"]), f"{v['first_loss']:.3f}", f"{v['final_loss']:.3f}",
         " / ".join(f"{a:.2f}" for a in v["final_acc_by_step"])]
        for k, v in build["drafters"].items()
    ]
    return "\n\n".join([
        f"Pool size on disk: {build['pool_bytes'] / 1e6:.1f} MB. Threads: {build['threads']}. "
        f"Seed: {build['seed']}.",
        "Stage times (seconds):\n\n" + _table(["stage", "seconds"], stage_rows),
        f"Target: {target['parameters'] / 1e6:.2f} M parameters, {target['train_tokens'] / 1e6:.2f} M "
        f"training tokens, final training loss {target['final_train_loss']:.3f} nats; aux layers "
        f"{target['aux_layers']} (input of decoder layer idx). Held-out loss per domain "
        "(nats/token over whole conversations):\n\n" + _table(["domain", "loss"], loss_rows),
        f"Rollouts: the target's own responses (temperature "
        f"{', '.join(str(t) for t in rcfg['temperatures'])}; 0 = greedy; at most "
        f"{rcfg['max_new_tokens']} new tokens) to {rcfg['prompts_per_domain']} training prompts per "
        f"domain: {roll['sequences']} sequences, {roll['response_tokens']} generated tokens, "
        f"{roll['ended_with_eos']} ended with `<|end|>`. The generalist trains on a mixture of the "
        f"first {rcfg['generalist_per_domain']} per domain; each specialist starts from it and is "
        f"fine-tuned on all of its domain's rollouts. Draft vocabulary: the "
        f"{dcfg['draft_vocab_size']} most frequent generated tokens of the mixture, covering "
        f"{100 * roll['draft_vocab_coverage']:.1f}% of all generated tokens. TTT unroll: "
        f"{dcfg['ttt_steps']} steps.",
        "Drafter training (TTT loss = Σ_s 0.8^s · loss_s; accuracy = top-1 agreement with the "
        "target per unroll step, last 25 steps):\n\n"
        + _table(["drafter", "steps", "first loss", "final loss", "acc per step"], drafter_rows),
    ])


METHOD = """\
## How the table is measured

Each cell is MAT, the mean number of tokens committed per target verification pass (accepted
draft tokens plus the bonus token), of one drafter on one domain's held-out prompts
(`eval_prompts.jsonl`, disjoint from the training corpora). It is measured with the real
speculative engine (`core.engine.SpecEngine`, policy `fixed:<drafter>`) with greedy
verification, so every drafter produces exactly the same text and only the number of
verification passes differs. MAT is computed as total committed tokens / total rounds over the
domain's prompts; per-prompt counts are in `report.json` (`per_prompt`).

What the numbers mean: the target is a {params:.1f} M-parameter model trained for minutes, so
its greedy continuations are short, formulaic and sometimes repetitive. Repetition is easy to
predict for every drafter, which lifts all cells alike; responses are capped at
{max_new} new tokens to keep loops from dominating. The differences between rows are what
drafter selection exploits: the specialists are fine-tuned copies of the generalist on one
domain's target rollouts, so they gain on that domain and lose elsewhere, as in the HedgeSpec
paper's Table 1 (7-8.5 MAT in-domain vs 5.7 for the generalist on Llama-3.1-8B).
"""


def render_report_md(report: dict[str, Any]) -> str:
    m, build = report["measurement"], report["build"]
    tree = m["tree"]
    head = (
        "# Demo pool report\n\n"
        "Built by `hedgespec demo build` (equivalently `python -m demo.pipeline`); this file and "
        "`report.json` are written by the build.\n\n"
        f"## Mean accepted tokens per round (greedy; tree top_k={tree['top_k']}, "
        f"depth={tree['depth']}, total_tokens={tree['total_tokens']}; "
        f"{m['prompts_per_domain']} held-out prompts per domain, up to {m['max_new_tokens']} new tokens)\n\n"
    )
    method = METHOD.format(params=build["target"]["parameters"] / 1e6, max_new=m["max_new_tokens"])
    return (
        head + mat_table(report) + "\n\n" + checks_text(report["checks"]) + "\n\n" + method
        + "\n## Build\n\n" + build_text(build) + "\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Re-render REPORT.md from report.json: `python -m demo.report_md demo/pool`."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("pool", type=Path)
    args = parser.parse_args(argv)
    report = json.loads((args.pool / "report.json").read_text())
    (args.pool / "REPORT.md").write_text(render_report_md(report))


if __name__ == "__main__":
    main()
