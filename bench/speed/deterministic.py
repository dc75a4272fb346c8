"""What canonical numerics cost (issue 60): plain decoding on the demo target in bf16 with
`deterministic` on (core/model/canonical.py) against off (the library's kernels), in process,
side by side in one run.

    python -m bench.speed.deterministic [--levels 1,4,8,16] [--repeats 3] [--max-tokens 96]
                                  [--out bench/results]

Method. Plain decoding (policy none) isolates the forward, where the two modes differ; a
speculative server runs the same forward on its trees. Each repeat builds a fresh engine per
mode (the order alternating repeat by repeat), runs one warm-up burst per level, then one
measured burst per level: N held-out prompts of the demo pool started together (fresh prompts
for every burst, the same for both modes), greedy, `ignore_eos`, `--max-tokens` each. tokens/s
= completion tokens / wall time (prefill included). A mode keeps its median burst per level;
its run-to-run noise is max/min - 1 over the repeats. Each burst's greedy texts are compared
with the same prompts decoded one at a time on the same engine: canonical numerics must agree
on every one.

Writes bench/results/deterministic.{md,json,png}. Run it on an idle machine (about 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.plotting import save_axes
from bench.prompts import DEFAULT_POOL, load_prompts
from core.config import EngineConfig, SamplingParams
from core.engine import SpecEngine

MODES = {"canonical": "on", "library": "off"}


@dataclass(frozen=True)
class Burst:
    mode: str
    streams: int
    tokens_per_s: float
    differ_from_alone: int  # outputs that differ from the same prompt decoded alone


def burst(engine: SpecEngine, prompts: list[list[int]], params: SamplingParams,
          tag: str) -> tuple[float, list[list[int]]]:
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}-{i}", p, params, "none")
    out: dict[str, list[int]] = {f"{tag}-{i}": [] for i in range(len(prompts))}
    start = time.perf_counter()
    while engine.has_unfinished():
        for o in engine.step():
            out[o.request_id] += o.token_ids
    rate = sum(len(v) for v in out.values()) / (time.perf_counter() - start)
    return rate, [out[f"{tag}-{i}"] for i in range(len(prompts))]


def run_mode(mode: str, sets: dict[int, tuple[list[list[int]], list[list[int]]]],
             params: SamplingParams, repeat: int) -> list[Burst]:
    engine = SpecEngine.from_pool_file(DEFAULT_POOL, EngineConfig(
        dtype="bfloat16", deterministic=MODES[mode]))
    bursts = []
    for n, (warm, measured) in sets.items():
        burst(engine, warm, params, f"w{n}")
        rate, texts = burst(engine, measured, params, f"m{n}")
        alone = [engine.generate_ids(p, params, policy="none")[0] for p in measured[:4]]
        differ = sum(a != b for a, b in zip(alone, texts, strict=False))
        bursts.append(Burst(mode, n, rate, differ))
        print(f"  repeat {repeat} {mode:9s} {n:2d} streams: {rate:6.1f} tok/s, "
              f"{differ} of {len(alone)} differ from alone", flush=True)
    return bursts


def render(bursts: list[Burst], levels: list[int], meta: dict[str, object]) -> str:
    lines = ["# Canonical numerics against the library's kernels "
             "(bench/speed/deterministic.py)", "",
             f"{meta['date']}, {meta['machine']}; SmolLM2-135M-Instruct bf16, plain decoding "
             f"in process, {meta['max_tokens']} tokens a request, {meta['repeats']} repeats "
             "(a fresh engine per mode each, order alternating); tokens/s, median burst "
             "(noise: max/min - 1 over the repeats).", "",
             "| streams | canonical | library | canonical x library | outputs differing "
             "from alone (canonical / library) |", "|---|---|---|---|---|"]
    for n in levels:
        rates = {m: [b.tokens_per_s for b in bursts if b.mode == m and b.streams == n]
                 for m in MODES}
        med = {m: statistics.median(r) for m, r in rates.items()}
        noise = {m: max(r) / min(r) - 1 for m, r in rates.items()}
        differ = {m: sum(b.differ_from_alone for b in bursts if b.mode == m and b.streams == n)
                  for m in MODES}
        checked = sum(min(4, n) for b in bursts if b.mode == "canonical" and b.streams == n)
        lines.append(f"| {n} | {med['canonical']:.1f} (±{100 * noise['canonical'] / 2:.0f}%) | "
                     f"{med['library']:.1f} (±{100 * noise['library'] / 2:.0f}%) | "
                     f"{med['canonical'] / med['library']:.2f}x | "
                     f"{differ['canonical']} / {differ['library']} of {checked} |")
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", default="1,4,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    params = SamplingParams(max_new_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    tokenizer = SpecEngine.from_pool_file(DEFAULT_POOL, EngineConfig()).tokenizer
    prompts = iter([q.ids for q in load_prompts(DEFAULT_POOL, tokenizer, 30, 400)])
    bursts: list[Burst] = []
    for repeat in range(args.repeats):
        sets = {n: ([next(prompts) for _ in range(n)], [next(prompts) for _ in range(n)])
                for n in levels}
        order = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
        for mode in order:
            bursts += run_mode(mode, sets, params, repeat)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
            "max_tokens": args.max_tokens, "repeats": args.repeats}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "deterministic.json").write_text(json.dumps(
        {"meta": meta, "bursts": [asdict(b) for b in bursts]}, indent=1))
    text = render(bursts, levels, meta)
    (args.out / "deterministic.md").write_text(text)
    _plot(bursts, levels, args.out / "deterministic.png")
    print(text)
    return 0


def _plot(bursts: list[Burst], levels: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for mode in MODES:
        ax.plot(levels, [statistics.median(b.tokens_per_s for b in bursts
                                           if b.mode == mode and b.streams == n)
                         for n in levels], marker="o", label=mode)
    ax.set_xscale("log", base=2)
    save_axes(fig, ax, path, xlabel="concurrent streams (held-out prompts, greedy, plain)",
              ylabel="tokens/s (median burst)",
              title="Canonical numerics against the library's kernels")


if __name__ == "__main__":
    raise SystemExit(main())
