"""The time-loss benchmark's tables and figure (bench/learner/time_loss.py measures): HedgeSpec
minimising measured time per token against plain decoding, each fixed arm and HedgeSpec's
acceptance loss drafting every step, per concurrency level."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.plotting import save_axes

# The learners' modes; the others are `plain` and the fixed arms (`fixed:<id>`).
LEARNED = ("length", "time")
LABELS = {"plain": "plain decoding", "length": "HedgeSpec, acceptance loss",
          "time": "HedgeSpec, time loss"}


@dataclass(frozen=True)
class Cell:
    """The median pass of one mode at one concurrency level (`passes`: every pass's
    tokens/s, for the run-to-run noise)."""

    mode: str
    streams: int
    tokens: int
    wall_s: float
    spec_steps: int  # request-steps that drafted
    spec_tokens: int  # tokens those steps committed
    plain_steps: int  # request-steps run plain (plain mode: all; a learner's: plain_rounds)
    full_tokens: int  # committed in steps whose round held every stream of the group
    full_s: float  # those steps' wall time
    passes: tuple[float, ...]
    outputs: tuple[tuple[int, ...], ...]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def full_tokens_per_s(self) -> float:
        """The rate while all N streams run: no prefill, no tail."""
        return self.full_tokens / self.full_s if self.full_s > 0 else 0.0

    @property
    def mat(self) -> float:
        """Tokens per speculative request-step (0 without one)."""
        return self.spec_tokens / self.spec_steps if self.spec_steps else 0.0

    @property
    def plain_share(self) -> float:
        steps = self.spec_steps + self.plain_steps
        return self.plain_steps / steps if steps else 0.0

    @property
    def noise(self) -> float | None:
        """max/min - 1 over the passes (None with one pass)."""
        if len(self.passes) < 2 or min(self.passes) <= 0:
            return None
        return max(self.passes) / min(self.passes) - 1.0


def mode_order(cells: list[Cell]) -> list[str]:
    """The modes in the order the runner measured them (plain, the fixed arms, the learners)."""
    return list(dict.fromkeys(c.mode for c in cells))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def level_row(by: dict[str, Cell]) -> dict[str, Any]:
    """One level: every mode's tokens/s and x plain, then the time mode against the others."""
    tps = {m: c.tokens_per_s for m, c in by.items()}
    fixed = {m: v for m, v in tps.items() if m.startswith("fixed:")}
    best_fixed = max(fixed, key=fixed.__getitem__) if fixed else None
    time = tps.get("time")
    never_always = max(tps["plain"], tps.get("length", 0.0))
    return {
        "streams": next(iter(by.values())).streams,
        **{f"{m}_tps": v for m, v in tps.items()},
        **{f"{m}_x_plain": v / tps["plain"] for m, v in tps.items()},
        **{f"{m}_mat": c.mat for m, c in by.items()},
        **{f"{m}_plain_share": c.plain_share for m, c in by.items() if m in LEARNED},
        **{f"{m}_full_tps": c.full_tokens_per_s for m, c in by.items()},
        "best_fixed": best_fixed,
        "time_x_best_fixed": _ratio(time, fixed.get(best_fixed or "")),
        "time_x_max_plain_length": _ratio(time, never_always),
        "time_plain_share": by["time"].plain_share if "time" in by else None,
    }


def rows(cells: list[Cell]) -> list[dict[str, Any]]:
    return [level_row({c.mode: c for c in cells if c.streams == n})
            for n in sorted({c.streams for c in cells})]


def noise(cells: list[Cell]) -> dict[str, Any]:
    """Each mode's max/min - 1 over its passes, per level, and their median."""
    per = {f"{c.mode}@{c.streams}": c.noise for c in cells}
    vals = [v for v in per.values() if v is not None]
    return {"per_cell": per, "median": statistics.median(vals) if vals else None}


def results_json(results: dict[str, Any]) -> dict[str, Any]:
    cells: list[Cell] = results["_cells"]
    return {"meta": results["meta"],
            "cells": [{k: v for k, v in asdict(c).items() if k != "outputs"} for c in cells],
            "levels": rows(cells), "noise": noise(cells)}


# -- markdown ------------------------------------------------------------------------------------
def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def header(meta: dict[str, Any], med: float | None) -> list[str]:
    noise_line = (f"Run-to-run noise (each mode's passes at a level, max/min - 1): median "
                  f"{100 * med:.1f}% over the cells (last table)." if med is not None else
                  "One pass per mode: no run-to-run noise measured.")
    top = max(int(n) for n in str(meta["levels"]).split(","))
    repeat = (f" At {top} streams a pass's {2 * top} requests repeat prompts ({meta['prompts']} "
              "in the workload): a repeated prompt's model-free lookups can find the earlier "
              "answer of the same pass." if 2 * top > meta["prompts"] else "")
    return [
        f"# Time loss: HedgeSpec minimising time per token, {meta['workload']} workload", "",
        f"`{meta['command']}` on {meta['machine']}; {meta['dtype']}, {meta['threads']} "
        f"thread(s), tree {tuple(meta['tree'])}, eval_every {meta['eval_every']}; shipped demo "
        f"pool ({meta['pool_members']}), workload {meta['workload']} ({meta['prompts']} prompts: "
        f"{meta['workload_text']}), greedy, {meta['max_new']} new tokens per request (ignore_eos: "
        f"every request commits as many). At each level N ({meta['levels']} streams), a pass "
        "runs two groups of N requests, each started together and stepped to completion in "
        "batched steps (prompt i of a pass is prompt i mod the workload's size). Modes: plain "
        "decoding (policy none); each fixed arm (`fixed:<id>`, every model-free member and the "
        "first EAGLE-3 drafter, drafting every step); HedgeSpec (NormalHedge) with the "
        "acceptance loss drafting every step (`length`); HedgeSpec with the time loss "
        "(`time`, plain decoding an extra arm, drafting allowed every step). All share one "
        "target and drafters; the model-free members start fresh at every pass (the suffix "
        "cache learns within a pass only). Each repeat runs every mode once, in an order drawn "
        f"afresh (seed {meta.get('seed', 0)}); each mode keeps the pass of median tokens/s of "
        f"its {meta['repeats']} (with an even count the slower middle one). Before a level's "
        f"passes the time engine ran {meta['time_warmup_groups']} groups of that size (its "
        f"cost model measures in place, as a server that has been up has).{repeat} "
        f"{noise_line}", "",
    ]


def warmed_lines(meta: dict[str, Any]) -> list[str]:
    """Whether the time loss's cost model had fitted, per level (nothing without a time
    mode)."""
    warmed = meta.get("warmed", {})
    if not any("time_model" in w for w in warmed.values()):
        return []
    model = "; ".join(f"{n} streams: {w['time_model']}" for n, w in warmed.items()
                      if "time_model" in w)
    return ["The time engine's cost model (core/selection/arm_costs.py) after its warm-up: "
            f"{model}.", ""]


def main_table(cells: list[Cell], modes: list[str]) -> list[str]:
    lines = ["Tokens/s over the whole pass (prefill and tail included), and x plain.", "",
             "| streams | " + " | ".join(modes) + " | time x best fixed arm "
             "| time x max(plain, length) | time: plain steps |",
             "|---|" + "---|" * (len(modes) + 3)]
    for r in rows(cells):
        tps = " | ".join(f"{r[f'{m}_tps']:.1f} ({r[f'{m}_x_plain']:.2f}x)" for m in modes)
        best = f" ({r['best_fixed']})" if r["best_fixed"] else ""
        lines.append(f"| {r['streams']} | {tps} | {_f(r['time_x_best_fixed'])}{best} "
                     f"| {_f(r['time_x_max_plain_length'])} "
                     f"| {_pct(r['time_plain_share'])} |")
    return lines


def detail_table(cells: list[Cell], modes: list[str]) -> list[str]:
    spec = [m for m in modes if m != "plain"]
    learned = [m for m in modes if m in LEARNED]
    lines = ["", "MAT over each mode's speculative request-steps, the learners' share of "
             "request-steps run plain (the time learner's plain arm; the acceptance loss "
             "drafts every step), and tokens/s over the steps whose round held all N streams "
             "of a group (no prefill, no tail: the steady batched rate).", "",
             "| streams | " + " | ".join(f"MAT {m}" for m in spec) + " | "
             + " | ".join(f"{m}: plain steps" for m in learned) + " | "
             + " | ".join(f"{m} full-batch tokens/s" for m in modes) + " |",
             "|---|" + "---|" * (len(spec) + len(learned) + len(modes))]
    for r in rows(cells):
        lines.append(f"| {r['streams']} | "
                     + " | ".join(f"{r[f'{m}_mat']:.2f}" for m in spec) + " | "
                     + " | ".join(_pct(r[f"{m}_plain_share"]) for m in learned) + " | "
                     + " | ".join(f"{r[f'{m}_full_tps']:.1f}" for m in modes) + " |")
    return lines


def noise_table(cells: list[Cell], modes: list[str]) -> list[str]:
    levels = sorted({c.streams for c in cells})
    by = {(c.mode, c.streams): c for c in cells}
    lines = ["", "Run-to-run noise: each mode's passes at a level, max/min - 1.", "",
             "| mode | " + " | ".join(f"{n} streams" for n in levels) + " |",
             "|---|" + "---|" * len(levels)]
    for m in modes:
        lines.append(f"| {m} | " + " | ".join(_pct_or_dash(by.get((m, n))) for n in levels)
                     + " |")
    return lines


def _pct_or_dash(c: Cell | None) -> str:
    if c is None or c.noise is None:
        return "-"
    return f"{100 * c.noise:.1f}%"


def render(results: dict[str, Any]) -> str:
    cells: list[Cell] = results["_cells"]
    modes = mode_order(cells)
    lines = header(results["meta"], noise(cells)["median"]) + warmed_lines(results["meta"])
    lines += main_table(cells, modes) + detail_table(cells, modes) + noise_table(cells, modes)
    return "\n".join(lines) + "\n"


# -- figure --------------------------------------------------------------------------------------
def plot(cells: list[Cell], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    plain = {c.streams: c.tokens_per_s for c in cells if c.mode == "plain"}
    markers = "osD^v<>p*h"
    for i, mode in enumerate(mode_order(cells)):
        pts = sorted((c.streams, c.tokens_per_s / plain[c.streams]) for c in cells
                     if c.mode == mode and plain.get(c.streams))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)],
                label=LABELS.get(mode, mode))
    ax.set_xscale("log", base=2)
    levels = sorted(plain)
    ax.set_xticks(levels, [str(n) for n in levels])
    save_axes(fig, ax, path, xlabel="concurrent streams", ylabel="tokens/s x plain decoding",
              title=title, legend_size=7)


def write_report(results: dict[str, Any], out: Path) -> None:
    """time_loss_<workload>.{md,json,png} under `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"time_loss_{results['meta']['workload']}"
    (out / f"{stem}.json").write_text(json.dumps(results_json(results), indent=1) + "\n")
    (out / f"{stem}.md").write_text(render(results))
    plot(results["_cells"], out / f"{stem}.png",
         f"Time loss, {results['meta']['workload']} ({results['meta']['dtype']}, CPU)")
