"""The target's LM head over the visited nodes of a verified tree against every node, side by
side on the shipped pool (EngineConfig.verify_logits; "auto" is a rule by device,
core/batching/head_rows.py, and this is the measurement behind it).

    python -m bench.speed.verify_logits [--quick] [--pool demo/pool/pool.json] [--threads 2]
                                  [--dtype auto] [--per-domain 1] [--max-new 48] [--repeats 2]
                                  [--streams 1]

The same target and pool run plain decoding, the generalist and HedgeSpec under each setting,
greedy, on held-out prompts; the settings alternate pass by pass and each keeps its fastest
pass. Also counted: the LM-head rows computed per round, and whether every setting commits the
tokens of "all". `--streams N` runs N requests at a time in batched steps (the head's cost per
request changes with the batch). Writes bench/results/verify_logits{,_s<N>}.{md,json,png}. Run it on
an idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from core.config import EngineConfig, SamplingParams, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype

MODES = ("all", "visited")
POLICIES = {"plain": "none", "generalist": "fixed:generalist", "hedgespec": "normalhedge"}


@dataclass(frozen=True)
class Cell:
    method: str
    mode: str
    tokens: int
    rounds: int
    head_rows: int
    wall_s: float
    outputs: tuple[tuple[int, ...], ...]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s

    @property
    def mat(self) -> float:
        return self.tokens / max(1, self.rounds)


class HeadCounter:
    """Counts the rows the target's LM head computes (wraps Target.head)."""

    def __init__(self, engine: SpecEngine) -> None:
        self.rows = 0
        self._head = engine.target.head
        engine.target.head = self  # type: ignore[method-assign]

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        self.rows += int(hidden.shape[0])
        return self._head(hidden)


def one_pass(engine: SpecEngine, counter: HeadCounter, prompts: list[Prompt], method: str,
             mode: str, max_new: int, streams: int = 1) -> Cell:
    """The prompts, `streams` at a time in the engine (batched steps when more than one)."""
    tokens = rounds = 0
    outputs = []
    counter.rows = 0
    t0 = time.perf_counter()
    for start in range(0, len(prompts), streams):
        for ids, n_rounds in run_together(engine, prompts[start : start + streams],
                                          POLICIES[method], max_new):
            tokens, rounds = tokens + len(ids), rounds + n_rounds + 1  # + the prefill pass
            outputs.append(tuple(ids))
    return Cell(method, mode, tokens, rounds, counter.rows, time.perf_counter() - t0,
                tuple(outputs))


def run_together(engine: SpecEngine, prompts: list[Prompt], policy: str,
                 max_new: int) -> list[tuple[list[int], int]]:
    """The prompts started together and stepped to completion: (tokens, rounds) each."""
    params = SamplingParams(max_new_tokens=max_new)
    ids: dict[str, list[int]] = {}
    rounds: dict[str, int] = {}
    for i, p in enumerate(prompts):
        engine.add_request(f"v{i}", p.ids, params, policy)
        ids[f"v{i}"] = []
    while engine.has_unfinished():
        for out in engine.step():
            if out.error:
                raise RuntimeError(out.error)
            ids[out.request_id] += out.token_ids
            rounds[out.request_id] = out.stats.rounds
    return [(ids[r], rounds[r]) for r in ids]


def measure(engines: dict[str, SpecEngine], counter: HeadCounter, prompts: list[Prompt],
            max_new: int, repeats: int, streams: int = 1) -> list[Cell]:
    best: dict[tuple[str, str], Cell] = {}
    for _ in range(repeats):
        for method in POLICIES:
            for mode, engine in engines.items():
                cell = one_pass(engine, counter, prompts, method, mode, max_new, streams)
                key = (method, mode)
                if key not in best or cell.tokens_per_s > best[key].tokens_per_s:
                    best[key] = cell
                print(f"  {method:<10} {mode:<7} {cell.tokens_per_s:6.2f} tokens/s  MAT "
                      f"{cell.mat:.2f}  head rows/round {cell.head_rows / cell.rounds:.1f}",
                      flush=True)
    return list(best.values())


def render(cells: list[Cell], meta: dict[str, Any]) -> str:
    by = {(c.method, c.mode): c for c in cells}
    lines = [
        "# LM head over visited nodes vs every node (verification)", "",
        f"`python -m bench.speed.verify_logits` on {meta['machine']}; {meta['dtype']}, "
        f"{meta['threads']} thread(s), tree {meta['tree']}; {meta['prompts']} held-out prompts "
        f"(one per domain), greedy, {meta['max_new']} new tokens each, shipped demo pool"
        + (f", {meta['streams']} requests at a time in batched steps (rows per pass below: per "
           "request and round)" if meta.get("streams", 1) > 1 else "") + ". "
        "Both settings share one engine's target and drafters and alternate pass by pass; "
        f"each keeps the fastest of {meta['repeats']} passes. Rows per pass = LM-head rows "
        "computed per target pass (prefill included).", "",
        "| method | logits of | tokens/s | MAT | head rows per pass | x plain (same setting) "
        "| x 'all' | same tokens as 'all' |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        plain = by[("plain", c.mode)].tokens_per_s
        ref = by[(c.method, "all")]
        lines.append(
            f"| {c.method} | {c.mode} | {c.tokens_per_s:.2f} | {c.mat:.2f} "
            f"| {c.head_rows / c.rounds:.1f} | {c.tokens_per_s / plain:.2f} "
            f"| {c.tokens_per_s / ref.tokens_per_s:.2f} | {c.outputs == ref.outputs} |")
    return "\n".join(lines) + "\n"


def plot(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    modes = [m for m in MODES if any(c.mode == m for c in cells)]
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        vals = [next(c.tokens_per_s for c in cells if c.method == m and c.mode == mode)
                for m in POLICIES]
        ax.bar([x + (i - (len(modes) - 1) / 2) * width for x in range(len(POLICIES))], vals,
               width, label=f"logits of {mode} nodes")
    ax.set_xticks(range(len(POLICIES)), list(POLICIES))
    ax.set_ylabel("tokens/s")
    ax.set_title("Verification LM head: visited nodes against all (SmolLM2-135M, CPU)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--per-domain", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2, help="passes per setting (fastest kept)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="8 tokens, one pass: a smoke test")
    ap.add_argument("--streams", type=int, default=1,
                    help="requests in the engine at once (batched steps); >1 writes "
                         "verify_logits_s<N>.*")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.max_new, args.repeats = 8, 1
    torch.set_num_threads(args.threads)
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    config = EngineConfig(max_context=4096, dtype=dtype, tree=served_tree("cpu"))
    base = SpecEngine.from_pool_file(args.pool, config)
    engines = {mode: SpecEngine(base.target, dict(base.snapshot.drafters),
                                replace(base.config, verify_logits=mode), base.model_name)
               for mode in MODES}
    counter = HeadCounter(base)
    prompts = load_prompts(args.pool, base.tokenizer, args.per_domain, 200)
    base.generate_ids(prompts[0].ids, SamplingParams(max_new_tokens=4))  # warm-up
    if args.streams > 1:  # every stream of a group in the same steps
        prompts = [prompts[i % len(prompts)] for i in range(args.streams * 2)]
    cells = measure(engines, counter, prompts, args.max_new, args.repeats, args.streams)
    tree = base.config.tree
    meta = {"machine": describe_machine(),
            "dtype": dtype, "threads": args.threads, "prompts": len(prompts),
            "max_new": args.max_new, "repeats": args.repeats, "streams": args.streams,
            "tree": (tree.top_k, tree.depth, tree.total_tokens)}
    stem = "verify_logits" if args.streams == 1 else f"verify_logits_s{args.streams}"
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{**{k: v for k, v in asdict(c).items() if k != "outputs"},
             "tokens_per_s": c.tokens_per_s, "mat": c.mat} for c in cells]
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                      indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(render(cells, meta))
    plot(cells, args.out / f"{stem}.png")
    print(render(cells, meta))


if __name__ == "__main__":
    main()
