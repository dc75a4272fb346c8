"""The served-sampling benchmark's table and figure (bench/learner/served_sampling.py measures)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Method -> the policy it runs (plain decoding, the generalist alone, HedgeSpec).
METHODS = {"plain": "none", "generalist": "fixed:generalist", "hedgespec": "normalhedge"}


@dataclass(frozen=True)
class Cell:
    """The fastest pass of one method under one sampling setting."""

    setting: str
    method: str
    tokens: int
    spec_tokens: int  # committed by verification rounds (the first token comes from prefill)
    rounds: int
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mat(self) -> float:
        """Tokens per target pass after prefill: per verification round (1.0 for plain)."""
        return self.spec_tokens / self.rounds if self.rounds else 1.0


def _describe(sampling: dict[str, float]) -> str:
    if not sampling.get("temperature", 1.0):
        return "temperature 0"
    return ", ".join(f"{k} {v:g}" for k, v in sampling.items()) or "temperature 1"


def render(cells: list[Cell], meta: dict[str, Any]) -> str:
    by = {(c.setting, c.method): c for c in cells}
    lines = [
        "# What a client gets by default: sampling settings side by side",
        "",
        f"`python -m bench.learner.served_sampling` on {meta['machine']}; {meta['dtype']}, "
        f"{meta['threads']} threads; {meta['prompts']} held-out prompts (one domain after "
        f"another), up to {meta['max_new']} new tokens each, stopping at EOS; one stream; tree "
        f"{tuple(meta['tree'])}; prompt i sampled with seed i; the fastest of "
        f"{meta['repeats']} passes per cell, methods alternating. HedgeSpec: the served "
        "selector (NormalHedge, the time loss: plain decoding one of its arms). MAT: tokens per "
        "verification round, HedgeSpec's plain rounds left out (plain decoding: 1).",
        "",
        "| setting | sampling | method | MAT | tokens/s | x plain | tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for setting, sampling in meta["settings"].items():
        plain = by.get((setting, "plain"))
        for method in METHODS:
            c = by.get((setting, method))
            if c is None:
                continue
            ratio = (f"{c.tokens_per_s / plain.tokens_per_s:.2f}x"
                     if plain and plain.tokens_per_s > 0 else "-")
            lines.append(f"| {setting} | {_describe(sampling)} | {method} | {c.mat:.2f} | "
                         f"{c.tokens_per_s:.2f} | {ratio} | {c.tokens} |")
    return "\n".join(lines) + "\n"


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys(c.setting for c in cells))
    by = {(c.setting, c.method): c for c in cells}
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    width = 0.8 / len(METHODS)
    for j, method in enumerate(METHODS):
        ys = [by[(s, method)].tokens_per_s if (s, method) in by else 0.0 for s in settings]
        ax.bar([i + (j - 1) * width for i in range(len(settings))], ys, width, label=method)
    ax.set_xticks(range(len(settings)), settings)
    top = max((c.tokens_per_s for c in cells), default=1.0)
    ax.set_ylim(0, top * 1.3)  # room for the legend above the bars
    ax.set_ylabel("tokens/s (one stream)")
    ax.set_title("Plain, generalist and HedgeSpec by sampling (SmolLM2-135M, CPU)")
    ax.legend(ncols=len(METHODS), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
