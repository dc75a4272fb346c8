"""Markdown tables and PNG plots for the HedgeSpec benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt

CURVES = ("hedgespec", "hedgespec_ada", "hedgespec_time", "ucbspec", "exp3spec", "generalist")


def write_report(r: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    public = {k: v for k, v in r.items() if not k.startswith("_")}
    (out / "hedgespec.json").write_text(json.dumps(public, indent=2, default=str) + "\n")
    runs = r["_runs"]
    calib = calibration(runs["hedgespec"])
    plot_regret(runs, out / "hedgespec_regret.png")
    plot_calibration(calib, out / "hedgespec_calibration.png")
    plot_pool_size(r["pool_size"], out / "hedgespec_pool_size.png")
    plot_domains(r, out / "hedgespec_domains.png")
    (out / "hedgespec.md").write_text(markdown(r, calib))


def where(c: dict[str, Any]) -> str:
    """'2 CPU thread(s)' or 'cuda, float32' (older results have no device: CPU)."""
    device = c.get("device", "cpu")
    if device == "cpu":
        return f"{c['threads']} CPU thread(s)"
    return f"{device}, {c.get('dtype', 'float32')}"


def _passes_line(r: dict[str, Any]) -> list[str]:
    """Which methods ran twice (once at each end of the run) and what each pass measured."""
    passes = r.get("passes") or {}
    if not passes:
        return []
    each = "; ".join(f"{name} {a:.1f} / {b:.1f}" for name, (a, b) in passes.items())
    return [f"Measured at both ends of the run, the faster pass kept (tokens/s, first / second "
            f"pass): {each}.", ""]


def _mixed_lines(r: dict[str, Any]) -> list[str]:
    c, m = r["config"], r["methods"]
    lines = ["# HedgeSpec benchmark (one run, all methods side by side)", "",
             f"Pool `{c['pool']}`; {c['prompts']} held-out prompts ({c['per_domain']} per domain, "
             f"domains interleaved request by request), {c['max_new_tokens']} new tokens each, "
             f"{c['decoding']} decoding; tree {c['tree']}; {where(c)}; torch {c['torch']}. MAT = "
             "tokens committed per target verification pass (bonus included) over a method's "
             "speculative rounds; the time loss's plain rounds (one token each) are counted "
             "apart (`plain rounds`: their share of its target passes). Learners live per "
             "request.", "", *_passes_line(r),
             "## Mixed workload", "",
             "| method | MAT | plain rounds | tokens/s | x plain | eval share of round time |",
             "|---|---|---|---|---|---|"]
    for name, s in m.items():
        share = s["plain_share"]
        lines.append(f"| {name} | {s['mat']:.2f} | {f'{share:.0%}' if share else '-'} | "
                     f"{s['tokens_per_s']:.1f} | {s['speedup_vs_plain']:.2f} | "
                     f"{s['eval_share']:.1%} |")
    return lines


def _target_lines(r: dict[str, Any]) -> list[str]:
    lines = ["", "Specialists' average MAT (each alone over all domains): "
                 f"{r['specialists_avg_mat']:.2f}.", "",
             "## Targets", "", "| target | measured | threshold | met |", "|---|---|---|---|"]
    for name, t in r["targets"].items():
        lines.append(f"| {name} | {t['value']:.3f} | {t['threshold']} | "
                     f"{'yes' if t['met'] else '**no**'} |")
    return lines


def _sampling_lines(r: dict[str, Any]) -> list[str]:
    if "sampling" not in r:
        return []
    lines = ["", "## Temperature 1 (seed i for prompt i, same prompts)", "",
             "| method | MAT | tokens/s | x plain |", "|---|---|---|---|"]
    plain = r["sampling"]["plain"]["tokens_per_s"] or 1.0
    for name, s in r["sampling"].items():
        lines.append(f"| {name} | {s['mat']:.2f} | {s['tokens_per_s']:.1f} | "
                     f"{s['tokens_per_s'] / plain:.2f} |")
    return lines


def _domain_lines(r: dict[str, Any]) -> list[str]:
    lines = ["", "## MAT per domain", "", "| method | " + " | ".join(r["domains"]) + " |",
             "|---|" + "---|" * len(r["domains"])]
    for name in r["methods"]:
        lines.append(f"| {name} | " + " | ".join(f"{r['domains'][d][name]['mat']:.2f}"
                                                 for d in r["domains"]) + " |")
    return lines


def _pool_size_lines(r: dict[str, Any]) -> list[str]:
    ps = r["pool_size"]
    sizes = sorted(next(iter(ps["mat"].values())))
    lines = ["", f"## MAT vs pool size (perturbed copies pad the pool; {ps['requests']} requests)",
             "", "| method | " + " | ".join(f"N={n}" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for name, row in ps["mat"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[n]:.2f}" for n in sizes) + " |")
    lines.append("| HedgeSpec eval share | "
                 + " | ".join(f"{ps['eval_share'][n]:.1%}" for n in sizes) + " |")
    return lines


def _estimator_lines(r: dict[str, Any]) -> list[str]:
    if "estimators" not in r:
        return []
    lines = ["", "## Estimator variants (HedgeSpec = NormalHedge; issue 14)", "",
             "Calibration: the chosen drafter's ÂL against the tokens its round realised (mean "
             "absolute error; slope of realised on ÂL, 1 = calibrated). Ranking: Spearman "
             "correlation between each drafter's mean ÂL in the run and its MAT when it runs alone "
             "on the same prompts. Saturated: share of windows at ÂL = K+1.", "",
             "| variant | estimator | loss | MAT | x oracle | mean abs(ÂL - realised) | "
             "slope | rank corr | saturated | windows |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in r["estimators"].items():
        lines.append(f"| {name} | {e['estimator']} | {e['loss']} | "
                     f"{e['mat']:.2f} | {e['mat_vs_oracle']:.2f} | {e['mae']:.2f} | "
                     f"{e['slope']:.2f} | {e['rank_corr']:.2f} | {e['saturated_share']:.0%} | "
                     f"{e['windows']} |")
    return lines


def _calibration_lines(calib: list[tuple[float, float, int]]) -> list[str]:
    return ["", "## Estimator calibration (HedgeSpec runs: ÂL of the chosen drafter vs realised "
                "tokens/round)", "",
            "| ÂL bin | mean realised | windows |", "|---|---|---|",
            *[f"| {lo:.1f} | {mean:.2f} | {n} |" for lo, mean, n in calib],
            "", "Plots: `hedgespec_regret.png` (mean cumulative regret in tokens vs feedback "
            "window, and in seconds for the time loss), `hedgespec_calibration.png`, "
            "`hedgespec_pool_size.png`, `hedgespec_domains.png`.", ""]


def markdown(r: dict[str, Any], calib: list[tuple[float, float, int]]) -> str:
    """The benchmark's Markdown report: one section per table, in reading order."""
    sections = (_mixed_lines(r), _target_lines(r), _sampling_lines(r), _domain_lines(r),
                _pool_size_lines(r), _estimator_lines(r), _calibration_lines(calib))
    return "\n".join(line for section in sections for line in section)


def calibration(runs: list[Any], width: float = 0.5) -> list[tuple[float, float, int]]:
    bins: dict[float, list[int]] = {}
    for run in runs:
        for est, realised in run.estimates:
            bins.setdefault(width * int(est / width), []).append(realised)
    return [(lo, sum(v) / len(v), len(v)) for lo, v in sorted(bins.items())]


def mean_curve(runs: list[Any], curve: str = "regret_curve") -> list[float]:
    """The mean over requests of a per-window curve (a request that ended holds its last
    value)."""
    curves = [c for r in runs if (c := getattr(r, curve))]
    length = max((len(c) for c in curves), default=0)
    return [sum(c[min(t, len(c) - 1)] for c in curves) / len(curves) for t in range(length)]


def plot_regret(runs: dict[str, list[Any]], path: Path) -> None:
    """Left: regret in tokens (every learner). Right: in seconds, for the runs whose learner
    costed its windows (the time loss)."""
    fig, (ax, sec) = plt.subplots(1, 2, figsize=(12, 4))
    for name in CURVES:
        if name in runs:
            ax.plot(mean_curve(runs[name]), label=name)
    ax.set(xlabel="feedback window (round)", ylabel="cumulative regret (tokens, from ÂL)",
           title="Regret vs the best single drafter in hindsight")
    ax.legend()
    for name, rs in runs.items():
        if seconds := mean_curve(rs, "regret_seconds_curve"):
            sec.plot([1000 * s for s in seconds], label=name)
    sec.set(xlabel="costed feedback window (round)", ylabel="cumulative regret (ms)",
            title="In seconds, vs the best single arm (plain decoding included)")
    if sec.lines:
        sec.legend()
    fig.suptitle("Mean over requests")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_calibration(calib: list[tuple[float, float, int]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 4))
    xs = [lo + 0.25 for lo, _, _ in calib]
    ax.scatter(xs, [m for _, m, _ in calib], s=[max(8, min(200, n)) for _, _, n in calib])
    top = max(xs + [m for _, m, _ in calib] + [2.0])
    ax.plot([1, top], [1, top], "k--", lw=1, label="ideal")
    ax.set(xlabel="ÂL (estimate, chosen drafter)", ylabel="realised tokens per round",
           title="Estimator calibration")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pool_size(ps: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, row in ps["mat"].items():
        ns = sorted(row)
        ax.plot(ns, [row[n] for n in ns], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="pool size N", ylabel="MAT", title="MAT vs pool size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_domains(r: dict[str, Any], path: Path) -> None:
    names = ["generalist", "hedgespec", "ucbspec", "exp3spec", "oracle"]
    domains = list(r["domains"])
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([d + i * width for d in range(len(domains))],
               [r["domains"][d][name]["mat"] for d in domains], width, label=name)
    ax.set_xticks([d + 0.4 - width / 2 for d in range(len(domains))], domains)
    ax.set(ylabel="MAT", title="MAT per domain")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
