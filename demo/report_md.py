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
    gains = checks["specialist_gain_in_domain"]
    short = [d for d, ok in checks["specialist_gain_at_least_1_2"].items() if not ok]
    lines = [
        "- Specialist over generalist on its own domain: "
        + ", ".join(f"{d} {g:.2f}x" for d, g in gains.items())
        + (" (all at least 1.2x)" if not short else f" (below 1.2x: {', '.join(short)})"),
        f"- Average over domains: generalist {checks['generalist_average']:.3f}, "
        f"specialists {checks['specialists_average']:.3f} "
        f"({'generalist ahead' if checks['generalist_beats_specialists_on_average'] else 'generalist NOT ahead'})",  # noqa: E501
        f"- Per-request oracle on the mixed workload: {checks['oracle_over_generalist']:.3f}x the "
        f"generalist's MAT ({'at least' if checks['oracle_at_least_1_25'] else 'below'} 1.25x)",
    ]
    return "\n".join(lines)


def build_text(build: dict[str, Any]) -> str:
    target, roll, cfg = build["target"], build["rollouts"], build["config"]
    rcfg, dcfg = cfg["rollouts"], cfg["drafter"]
    cached = set(build["cached_stages"])
    stage_rows = [[k, f"{v:.0f}"] for k, v in build["stage_seconds"].items()]
    stage_rows.append(["**total**", f"**{build['total_seconds']:.0f}**"])
    drafter_rows = [
        [k, str(v["steps"]), f"{v['first_loss']:.3f}", f"{v['final_loss']:.3f}",
         " / ".join(f"{a:.2f}" for a in v["final_acc_by_step"])]
        for k, v in build["drafters"].items()
    ]
    return "\n\n".join([
        f"Pool size on disk: {build['pool_bytes'] / 1e6:.1f} MB. Threads: {build['threads']}. "
        f"Seed: {build['seed']}. Reused from the stage cache: "
        f"{', '.join(sorted(cached)) or 'nothing'}.",
        "Stage times (seconds):\n\n" + _table(["stage", "seconds"], stage_rows),
        f"Target: {target['name']}, {target['parameters'] / 1e6:.1f} M parameters, "
        f"{target['layers']} layers, from {target['source']}; build passes in {target['dtype']}; "
        f"aux layers {target['aux_layers']} (input of decoder layer idx).",
        f"Rollouts: the target's own responses (greedy to {rcfg['greedy_per_domain']} training "
        f"prompts per domain{_domain_greedy_text(rcfg)}, and once more at temperature 1 to "
        f"the first {rcfg['sampled_per_domain']} of them{_general_text(rcfg)}; at most "
        f"{rcfg['max_new_tokens']} new tokens): "
        f"{roll['sequences']} sequences{_dtype_text(roll)}, {roll['response_tokens']} "
        "generated tokens, "
        f"{roll['ended_with_eos']} ended with EOS. " + _regime_text(cfg) + " "
        f"Draft vocabulary of the generalist: the {dcfg['draft_vocab_size']} most frequent "
        f"generated tokens of its data, covering {100 * roll['draft_vocab_coverage']:.1f}% of "
        f"all generated tokens. TTT unroll: {dcfg['ttt_steps']} steps; packed rows of "
        f"{dcfg['row_tokens']} tokens, {dcfg['batch_rows']} rows per step.",
        "Drafter training (TTT loss = Σ_s 0.8^s · loss_s; accuracy = top-1 agreement with the "
        "target per unroll step, last 25 steps):\n\n"
        + _table(["drafter", "steps", "first loss", "final loss", "acc per step"], drafter_rows),
        *[retrained_text(e) for e in build.get("retrained", [])],
    ])


def retrained_text(e: dict[str, Any]) -> str:
    """One `python -m demo.retrain` run after the build (its logs are in the table above)."""
    epochs = ", ".join(f"{d} {n:g} epochs" for d, n in e["epochs"].items())
    where = "with" if e["native_bf16"] else "without"
    threads = f"{e['threads']} thread" + ("s" if e["threads"] != 1 else "")
    return (f"Retrained after the build on {e['date']} with the build's specialist recipe "
            f"(`demo/retrain.py`: a copy of the generalist fine-tuned on the domain's rollouts, "
            f"lr {e['lr']:g}): {epochs}{_retrain_data_text(e)}; features in "
            f"{e['features_dtype']} on a CPU {where} "
            f"native bf16, {threads}, {e['seconds']} s. Their rows in every table above were "
            f"measured again after it.")


def _retrain_data_text(e: dict[str, Any]) -> str:
    """What each retrained specialist learnt from (recorded since the medical retrain)."""
    data = e.get("rollouts") or {}
    return "".join(
        f"; {d} on {r['sequences']} rollouts ("
        + " + ".join(f"{n} at temperature {t}" for t, n in r["by_temperature"].items())
        + f"{_dtype_text(r)}, {r['response_tokens']} generated tokens)"
        for d, r in data.items())


def _dtype_text(counts: dict[str, Any]) -> str:
    """Which precision generated the rollouts ("" for a report made before they recorded it)."""
    by_dtype = counts.get("by_dtype") or {}
    return "; generated in " + ", ".join(f"{d} ({n})" for d, n in by_dtype.items()) \
        if by_dtype else ""


def _domain_greedy_text(rcfg: dict[str, Any]) -> str:
    counts = rcfg.get("domain_greedy") or {}
    return "".join(f", {d} {n}" for d, n in counts.items())


def _general_text(rcfg: dict[str, Any]) -> str:
    if not rcfg.get("general_greedy"):
        return ""
    return (f"; greedy to {rcfg['general_greedy']} synthesised general-chat prompts and once "
            f"more at temperature 1 to every {rcfg['general_sampled_every']}th")


def _regime_text(cfg: dict[str, Any]) -> str:
    share = cfg["rollouts"]["generalist_per_domain"]
    chat = "the general chat plus " if cfg["rollouts"].get("general_greedy") else ""
    generalist = (f"The generalist trains on {chat}an equal small share of every domain (the "
                  f"first {share} prompts of each, both temperatures); ")
    if cfg.get("specialist_init", "generalist") == "scratch":
        return generalist + ("each specialist is trained from scratch on its own domain's "
                             "rollouts only, with a draft vocabulary from that domain's tokens.")
    return generalist + ("each specialist starts from it and is fine-tuned on all of its "
                         "domain's rollouts.")


METHOD = """\
## How the tables are measured

Each cell is MAT, the mean number of tokens committed per target verification pass (accepted
draft tokens plus the bonus token), of one drafter on one domain's held-out prompts
(`eval_prompts.jsonl`, disjoint from the training corpora), measured with the real
speculative engine (`core.engine.SpecEngine`, policy `fixed:<drafter>`) in the dtype
`hedgespec serve` uses on this CPU (each table names its dtype). With greedy verification in
fp32 every drafter produces the same text and only the number of verification passes differs
(in bf16 a different tree shape can tip a near-tie, so drafters may commit different texts);
at temperature 1 prompt i is sampled
with seed i for every drafter (verification is lossless, so each drafter's text follows the
target distribution). MAT is total committed tokens / total rounds over a domain's prompts;
per-prompt counts are in `report.json` (`per_prompt`), from which the per-request oracle (the
best drafter for each prompt in hindsight, on all domains' prompts together) is computed.

The generalist learns from a small share of every domain and each specialist from one domain's
target rollouts, so that a specialist gains in its domain and the generalist leads on average,
as in the HedgeSpec paper's Table 1 (7-8.5 MAT in-domain vs 5.7 for the generalist on
Llama-3.1-8B); `build` below says how this pool's drafters were trained.
"""


def _section(title: str, table: dict[str, Any]) -> str:
    m = table["measurement"]
    tree = m["tree"]
    return (
        f"## {title} ({m['dtype']}; tree top_k={tree['top_k']}, depth={tree['depth']}, "
        f"total_tokens={tree['total_tokens']}; {m['prompts_per_domain']} held-out prompts per "
        f"domain, up to {m['max_new_tokens']} new tokens)\n\n"
        + mat_table(table) + "\n\n" + checks_text(table["checks"]) + "\n"
    )


def render_report_md(report: dict[str, Any]) -> str:
    head = (
        "# Demo pool report\n\n"
        "Built by `hedgespec demo build` (equivalently `python -m demo.pipeline`); this file and "
        "`report.json` are written by the build (a table measured again later is listed, with the "
        "figures it replaced, under \"Re-measured after the build\").\n\n"
    )
    parts = [_section("Mean accepted tokens per round, greedy", report)]
    for t, table in report.get("sampling", {}).items():
        parts.append(_section(f"Mean accepted tokens per round, temperature {t}", table))
    if report.get("remeasured"):
        parts.append(remeasured_text(report))
    return (head + "\n".join(parts) + "\n" + METHOD + "\n## Build\n\n"
            + build_text(report["build"]) + "\n")


def remeasured_text(report: dict[str, Any]) -> str:
    """Each table measured again after the build, with the figures it replaced."""
    lines = ["## Re-measured after the build\n",
             "These tables were measured again with `python -m demo.report_update` (same tree, "
             "token budget and prompts); the tables they replaced, as the build or an earlier "
             "re-measurement left them:\n"]
    for e in report["remeasured"]:
        old = e["replaced"]
        where = "with" if e["native_bf16"] else "without"
        rows = e.get("rows", report["drafters"])
        which = "" if rows == report["drafters"] else f", rows {', '.join(rows)} only"
        lines += [
            f"### Temperature {e['temperature']}: {e['dtype']} on {e['date']} (a CPU {where} "
            f"native bf16, {e['workers']} workers, {e['seconds']} s{which}), replacing "
            f"{old['measurement']['dtype']}\n",
            mat_table({**old, "domains": report["domains"], "drafters": report["drafters"]}),
            "", checks_text(old["checks"]), "",
        ]
    return "\n".join(lines)


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
