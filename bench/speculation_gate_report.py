"""The speculation gate benchmark's table and figure (bench/speculation_gate.py measures)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("plain", "always", "auto")
LABELS = {"plain": "plain decoding", "always": "HedgeSpec, drafting every step",
          "auto": "HedgeSpec, speculation gate (auto)"}


@dataclass(frozen=True)
class Cell:
    """The fastest pass of one mode at one concurrency level."""

    mode: str
    streams: int
    tokens: int
    wall_s: float
    spec_steps: int  # request-steps that drafted
    spec_tokens: int  # tokens those steps committed
    plain_steps: int  # request-steps the gate ran plain
    full_tokens: int  # committed in steps whose round held every stream of the group
    full_s: float  # those steps' wall time
    outputs: tuple[tuple[int, ...], ...]

    @property
    def full_tokens_per_s(self) -> float:
        """The rate while all N streams run: no prefill, no tail (what the gate compares)."""
        return self.full_tokens / self.full_s if self.full_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mat(self) -> float:
        """Tokens per speculative request-step (0 without one)."""
        return self.spec_tokens / self.spec_steps if self.spec_steps else 0.0


def rows(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per level: each mode's tokens/s, the ratios, the auto run's plain share."""
    out = []
    for n in sorted({c.streams for c in cells}):
        by = {c.mode: c for c in cells if c.streams == n}
        plain, always, auto = (by[m] for m in MODES)
        best = max(plain.tokens_per_s, always.tokens_per_s)
        steps = auto.spec_steps + auto.plain_steps
        out.append({
            "streams": n, **{f"{m}_tps": by[m].tokens_per_s for m in MODES},
            "always_x_plain": always.tokens_per_s / plain.tokens_per_s,
            "auto_x_plain": auto.tokens_per_s / plain.tokens_per_s,
            "auto_x_best": auto.tokens_per_s / best,
            "always_mat": always.mat,
            "auto_plain_share": auto.plain_steps / steps if steps else 0.0,
            "auto_same_tokens_as_always": auto.outputs == always.outputs,
            **{f"{m}_full_tps": by[m].full_tokens_per_s for m in MODES},
        })
    return out


def render(cells: list[Cell], meta: dict[str, Any]) -> str:
    lines = [
        "# Speculation gate: drafting on or off by measured throughput, per batch size", "",
        f"`python -m bench.speculation_gate` on {meta['machine']}; {meta['dtype']}, "
        f"{meta['threads']} thread(s), tree {meta['tree']}, eval_every {meta['eval_every']}; "
        f"shipped demo pool, held-out prompts of every domain, greedy, {meta['max_new']} new "
        "tokens per request (ignore_eos: every request commits as many). "
        "At each level N, N requests run together in batched steps, two groups per pass; "
        "plain decoding, HedgeSpec drafting every step (`speculation=\"always\"`) and "
        "HedgeSpec under the gate (`speculation=\"auto\"`, core/spec_gate.py) share one target "
        "and pool and alternate pass by pass; each keeps the fastest of "
        f"{meta['repeats']} passes. Before the passes of a level, the gate's engine ran "
        "groups of that size until it had chosen (what a server that has been up does).", "",
        "| streams | plain tokens/s | always tokens/s | auto tokens/s | always x plain "
        "| auto x plain | auto x best of the two | MAT (always) | auto: plain steps "
        "| gate's choice (tokens/s measured) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows(cells):
        choice = meta["choices"].get(str(r["streams"]), "")
        lines.append(
            f"| {r['streams']} | {r['plain_tps']:.1f} | {r['always_tps']:.1f} "
            f"| {r['auto_tps']:.1f} | {r['always_x_plain']:.2f} | {r['auto_x_plain']:.2f} "
            f"| {r['auto_x_best']:.2f} | {r['always_mat']:.2f} "
            f"| {100 * r['auto_plain_share']:.0f}% | {choice} |")
    lines += [
        "", "The same passes counted only over the steps whose round held all N streams of a "
        "group (no prefill, no tail). End to end, a speculating group pays two costs outside "
        "these steps: its requests' drafters catch up on the prompts when they are prefilled "
        "(HedgeSpec scores every drafter from the first round), and its streams finish at "
        "different steps (their MAT differs), so its last steps run fewer rows; plain streams "
        "of a group finish together. The gate compares rates of this kind (round time per "
        "batch size), so this table is where its choice should match the better mode.", "",
        "| streams | plain tokens/s | always tokens/s | auto tokens/s | always x plain "
        "| auto x plain |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows(cells):
        lines.append(
            f"| {r['streams']} | {r['plain_full_tps']:.1f} | {r['always_full_tps']:.1f} "
            f"| {r['auto_full_tps']:.1f} | {_ratio(r['always_full_tps'], r['plain_full_tps'])} "
            f"| {_ratio(r['auto_full_tps'], r['plain_full_tps'])} |")
    same = all(r["auto_same_tokens_as_always"] for r in rows(cells))
    lines += ["", "Same tokens under the gate as drafting every step: "
              + ("yes, at every level." if same else
                 f"not at every level. In {meta['dtype']} a plain step and a verified tree "
                 "compute the same position over different shapes, and low-precision sums "
                 "can flip a near-tie (the suite checks identity in float32).")]
    return "\n".join(lines) + "\n"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for mode, marker in zip(MODES, ("o", "s", "^"), strict=True):
        pts = sorted((c.streams, c.tokens_per_s) for c in cells if c.mode == mode)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=LABELS[mode])
    ax.set_xscale("log", base=2)
    levels = sorted({c.streams for c in cells})
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("aggregate tokens/s")
    ax.set_title("Speculation gate (SmolLM2-135M, CPU)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
