"""The arm policy's sleep constants swept (issue 58: each tuning constant justified by a sweep
or removed): the served default in process at low concurrency, where its sleep decides most,
with one constant of core/selection/arm_policy.py moved at a time.

    python -m bench.learner.arm_policy_sweep [--sweep PROBE_ROUNDS=16,32,64] [--sweep ...]
                                     [--levels 1,2] [--prompts 12] [--max-new 48]
                                     [--passes 2] [--seed 0] [--threads 2] [--quick]
                                     [--out bench/results]

Configurations: the defaults, and each listed value of each swept constant with the others at
their defaults (the default's own value is the default configuration). Each configuration
has its own engine for the whole run (the suffix member remembers the answers it served: one
engine per configuration, so none sees another's), all built with the served CPU defaults
(core.config.served_selector, served_tree) on the shipped pool. At each level and pass every
engine runs the same two warm-up groups of N held-out prompts (its cost model fits that step
size), then the same measured groups (`--prompts` prompts, N at a time, 48 tokens each,
greedy), each group on every configuration in turn, in an order drawn afresh per group (the
machine's drift then falls on every configuration alike). A configuration's rate is its
tokens over its wall time across the measured groups; its ratio to the defaults is the median
over passes of the per-pass ratio (the same prompts), and a value wins where that median is
above 1 and every pass's ratio is, loses where every pass's is below 1, and is within noise
otherwise. Writes bench/results/arm_policy_sweep.{md,json,png}. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import core.selection.arm_policy as arm_policy
from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.plotting import save_axes
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype

SWEEPS = ("PROBE_ROUNDS=16,32,64", "PROBE_LENGTH=8,16,32", "SLEEP_SHARE=0.02,0.05,0.15")
WARMUP_GROUPS = 2
PER_DOMAIN = 30  # every held-out prompt of the demo pool


@dataclass(frozen=True)
class Config:
    """A configuration: the defaults, or one constant set to one value."""

    constant: str | None = None
    value: float | None = None

    @property
    def name(self) -> str:
        return "defaults" if self.constant is None else f"{self.constant}={self.value:g}"


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """'NAME=v1,v2' -> ('NAME', [v1, v2]); NAME a constant of core/selection/arm_policy.py."""
    name, _, values = spec.partition("=")
    if not hasattr(arm_policy, name) or not values:
        raise ValueError(f"--sweep {spec!r}: expected NAME=v1,v2 with NAME a constant of "
                         "core/selection/arm_policy.py")
    return name, [float(v) for v in values.split(",")]


def configs(sweeps: list[tuple[str, list[float]]]) -> list[Config]:
    """The defaults first, then every swept value that is not its constant's default."""
    out = [Config()]
    for name, values in sweeps:
        default = float(getattr(arm_policy, name))
        out += [Config(name, v) for v in values if v != default]
    return out


@contextmanager
def applied(config: Config) -> Iterator[None]:
    """The configuration's constant set while its engine runs (read at each decision)."""
    if config.constant is None:
        yield
        return
    old = getattr(arm_policy, config.constant)
    setattr(arm_policy, config.constant, type(old)(config.value))
    try:
        yield
    finally:
        setattr(arm_policy, config.constant, old)


def run_group(engine: SpecEngine, prompts: list[Prompt], max_new: int) -> tuple[int, float]:
    """The prompts started together and stepped to completion: tokens, seconds."""
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"g{i}", p.ids, params, "auto")
    tokens, t0 = 0, time.perf_counter()
    while engine.has_unfinished():
        for out in engine.step():
            if out.error:
                raise RuntimeError(out.error)
            tokens += len(out.token_ids)
    return tokens, time.perf_counter() - t0


def ratios(rates: list[float], base: list[float]) -> list[float]:
    """Pass by pass, a configuration's rate over the defaults' (the same prompts)."""
    return [r / b for r, b in zip(rates, base, strict=True) if b > 0]


def verdict(per_pass: list[float]) -> str:
    if not per_pass:
        return "-"
    if statistics.median(per_pass) > 1.0 and min(per_pass) > 1.0:
        return "wins"
    return "loses" if max(per_pass) < 1.0 else "within noise"


def level_rows(n: int, rates: dict[str, list[float]]) -> list[dict[str, Any]]:
    """One row per configuration at n streams: its rate per pass, median, ratio, verdict."""
    base = rates["defaults"]
    rows = []
    for name, rs in rates.items():
        per_pass = ratios(rs, base)
        rows.append({"streams": n, "config": name, "rates": rs,
                     "median": statistics.median(rs), "ratios": per_pass,
                     "ratio": statistics.median(per_pass) if per_pass else None,
                     "verdict": "-" if name == "defaults" else verdict(per_pass)})
    return rows


def measure(engines: dict[Config, SpecEngine], prompts: list[Prompt], levels: list[int],
            count: int, max_new: int, passes: int, seed: int) -> list[dict[str, Any]]:
    """Per level: every engine's warm-up groups, then each measured group on every engine in
    turn (an order drawn afresh per group), so that the machine's drift (on this shared
    two-core box the same matrix product varies by a quarter from one second to the next)
    falls on every configuration alike; a pass's rate is its tokens over its seconds."""
    rng, rows, at = random.Random(seed), [], 0
    for n in levels:
        rates: dict[str, list[float]] = {c.name: [] for c in engines}
        warm = [prompts[(at + i) % len(prompts)] for i in range(WARMUP_GROUPS * n)]
        at += len(warm)
        for config, engine in engines.items():
            with applied(config):
                for g in range(0, len(warm), n):
                    run_group(engine, warm[g:g + n], max_new)
        for _ in range(passes):
            measured = [prompts[(at + i) % len(prompts)] for i in range(count)]
            at += count
            runs: dict[Config, list[tuple[int, float]]] = {c: [] for c in engines}
            for g in range(0, count, n):
                for config in rng.sample(list(engines), len(engines)):
                    with applied(config):
                        runs[config].append(run_group(engines[config], measured[g:g + n],
                                                      max_new))
            for config, done in runs.items():
                rate = sum(t for t, _ in done) / sum(s for _, s in done)
                rates[config.name].append(rate)
                print(f"  {n} streams {config.name:<22} {rate:6.1f} tokens/s", flush=True)
        rows += level_rows(n, rates)
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# The arm policy's sleep constants, swept", "",
             f"`{meta['command']}` on {meta['machine']}, {meta['date']}; {meta['dtype']}, "
             f"{meta['threads']} torch threads, the served CPU defaults on the shipped pool; "
             f"{meta['prompts']} held-out prompts of {meta['max_new']} tokens a pass at each "
             f"level, {meta['passes']} passes, one engine per configuration, "
             f"{WARMUP_GROUPS} warm-up groups a level, each group on every configuration in "
             "turn. Method: the module docstring.",
             "", "| streams | configuration | tokens/s per pass | median | x defaults "
             "(per pass) | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        each = ", ".join(f"{x:.1f}" for x in r["rates"])
        per = ", ".join(f"{x:.2f}" for x in r["ratios"])
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f} ({per})"
        lines.append(f"| {r['streams']} | {r['config']} | {each} | {r['median']:.1f} | "
                     f"{ratio} | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["streams"] for r in rows})
    names = list(dict.fromkeys(r["config"] for r in rows))
    fig, ax = plt.subplots(figsize=(9.0, 4.0))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [k + (i - (len(names) - 1) / 2) * width for k in range(len(levels))]
        ys = [next(r["ratio"] or 0.0 for r in rows if r["streams"] == n and r["config"] == name)
              for n in levels]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(levels)), [str(n) for n in levels])
    save_axes(fig, ax, path, xlabel="concurrent streams", ylabel="tokens/s x the defaults",
              title="Arm policy sleep constants (median of per-pass ratios)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.learner.arm_policy_sweep",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--sweep", action="append", help="NAME=v1,v2 (repeatable)")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--prompts", type=int, default=12, help="measured prompts a level and pass")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="one stream, 2 prompts of 8 tokens, one pass, PROBE_ROUNDS only")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.levels, args.prompts, args.max_new, args.passes = "1", 2, 8, 1
        args.sweep = args.sweep or ["PROBE_ROUNDS=16,64"]
    args.sweep = args.sweep or list(SWEEPS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sweeps = [parse_sweep(s) for s in args.sweep]
    dtype = auto_dtype()
    config = EngineConfig(max_context=4096, dtype=dtype, tree=served_tree("cpu"),
                          selector=served_selector("cpu"), max_running=16)
    engines = {c: SpecEngine.from_pool_file(args.pool, config) for c in configs(sweeps)}
    first = next(iter(engines.values()))
    prompts = load_prompts(args.pool, first.tokenizer, PER_DOMAIN, 200)
    for engine in engines.values():  # first steps (shapes, in-place timings), then forgotten
        run_group(engine, prompts[:1], 4)
        engine.forget_costs()
    levels = [int(x) for x in args.levels.split(",")]
    rows = measure(engines, prompts, levels, args.prompts, args.max_new, args.passes, args.seed)
    meta = {"command": ("python -m bench.learner.arm_policy_sweep"
                        + (" --quick" if args.quick else "")),
            "machine": describe_machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "dtype": str(dtype), "threads": args.threads, "prompts": args.prompts,
            "max_new": args.max_new, "passes": args.passes, "sweeps": args.sweep}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "arm_policy_sweep.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                               indent=1))
    (args.out / "arm_policy_sweep.md").write_text(render(rows, meta))
    plot(rows, args.out / "arm_policy_sweep.png")
    print(render(rows, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
