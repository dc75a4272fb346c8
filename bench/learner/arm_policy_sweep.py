"""The arm policy's tuning constants swept (issue 58: each tuning constant justified by a sweep
or removed): the served default in process at low concurrency, where its sleep decides most,
with one constant of core/selection/arm_policy.py (NAME) or core/selection/arm_costs.py
(arm_costs.NAME) moved at a time.

    python -m bench.learner.arm_policy_sweep [--sweep PROBE_ROUNDS=16,32,64] [--sweep ...]
                                     [--levels 1,2] [--prompts 12] [--max-new 48]
                                     [--passes 2] [--seed 0] [--threads 2] [--quick]
                                     [--name arm_policy_sweep] [--out bench/results]

Configurations: the defaults, a control (the defaults again, on an engine of its own: its
ratio to the defaults is the run's noise and any bias of the engines' order), and each listed
value of each swept constant with the others at their defaults (the default's own value is the
default configuration). Each configuration
has its own engine for the whole run (the suffix member remembers the answers it served: one
engine per configuration, so none sees another's), all built with the served CPU defaults
(core.config.served_selector, served_tree) on the shipped pool. At each level and pass every
engine runs the same two warm-up groups of N held-out prompts (its cost model fits that step
size), then the same measured groups (`--prompts` prompts, N at a time, 48 tokens each,
greedy), each group on every configuration in turn, in an order drawn afresh per group (the
machine's drift then falls on every configuration alike). A configuration's rate is its
tokens over its wall time across the measured groups; its ratio to the defaults is the median
over passes of the per-pass ratio (the same prompts), and a value wins where that median is
above 1 and every pass's ratio is above 1 and above the control's, loses where every pass's
is below 1 and below the control's, and is within noise otherwise. Writes
bench/results/<name>.{md,json,png} (arm_policy_sweep: the sleep constants; arm_costs_sweep: the
cost model's and start levels' constants). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import core.selection.arm_costs as arm_costs
import core.selection.arm_policy as arm_policy
from bench.machine import describe_machine
from bench.paths import RESULTS
from bench.plotting import save_axes
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype

SWEEPS = ("PROBE_ROUNDS=16,32,64", "PROBE_LENGTH=8,16,32", "SLEEP_SHARE=0.02,0.05,0.15")
CONTROL = "defaults (control)"
# The modules whose constants a sweep may move (a bare NAME is the arm policy's).
MODULES: dict[str, Any] = {"arm_policy": arm_policy, "arm_costs": arm_costs}
WARMUP_GROUPS = 2
PER_DOMAIN = 30  # every held-out prompt of the demo pool


@dataclass(frozen=True)
class Config:
    """A configuration: the defaults, a second engine with the defaults (`control`), or one
    constant set to one value."""

    constant: str | None = None
    value: float | None = None
    control: bool = False

    @property
    def name(self) -> str:
        if self.constant is None:
            return "defaults (control)" if self.control else "defaults"
        return f"{self.constant}={self.value:g}"


def constant(name: str) -> tuple[Any, str]:
    """'NAME' or 'module.NAME' -> (the module, NAME); KeyError where it names no constant of
    MODULES."""
    module, _, attr = name.rpartition(".")
    owner = MODULES[module or "arm_policy"]
    if not attr.isupper() or not hasattr(owner, attr):
        raise KeyError(name)
    return owner, attr


def parse_sweep(spec: str) -> tuple[str, list[float]]:
    """'NAME=v1,v2' -> ('NAME', [v1, v2]); NAME a constant of core/selection/arm_policy.py, or
    arm_costs.NAME one of core/selection/arm_costs.py."""
    name, _, values = spec.partition("=")
    try:
        constant(name)
    except KeyError:
        values = ""
    if not values:
        raise ValueError(f"--sweep {spec!r}: expected NAME=v1,v2 with NAME a constant of "
                         "core/selection/arm_policy.py or arm_costs.NAME one of "
                         "core/selection/arm_costs.py")
    return name, [float(v) for v in values.split(",")]


def configs(sweeps: list[tuple[str, list[float]]]) -> list[Config]:
    """The defaults first and their control (the same code on its own engine: what a value
    must beat is that engine's ratio, the run's noise and any bias of engine order), then every
    swept value that is not its constant's default."""
    out = [Config(), Config(control=True)]
    for name, values in sweeps:
        default = float(getattr(*constant(name)))
        out += [Config(name, v) for v in values if v != default]
    return out


@contextmanager
def applied(config: Config) -> Iterator[None]:
    """The configuration's constant set while its engine is built and runs (read at each
    decision, or when the engine's StepCosts is made)."""
    if config.constant is None:
        yield
        return
    owner, attr = constant(config.constant)
    old = getattr(owner, attr)
    setattr(owner, attr, type(old)(config.value))
    try:
        yield
    finally:
        setattr(owner, attr, old)


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


def verdict(per_pass: list[float], control: Sequence[float] = ()) -> str:
    """wins: every pass above 1 and above every pass of the control (the defaults' second
    engine); loses: every pass below 1 and below every pass of the control; else within
    noise."""
    if not per_pass:
        return "-"
    high, low = max([1.0, *control]), min([1.0, *control])
    if statistics.median(per_pass) > 1.0 and min(per_pass) > high:
        return "wins"
    return "loses" if max(per_pass) < low else "within noise"


def level_rows(n: int, rates: dict[str, list[float]]) -> list[dict[str, Any]]:
    """One row per configuration at n streams: its rate per pass, median, ratio, verdict."""
    base = rates["defaults"]
    control = ratios(rates[CONTROL], base) if CONTROL in rates else []
    rows = []
    for name, rs in rates.items():
        per_pass = ratios(rs, base)
        judged = name not in ("defaults", CONTROL)
        rows.append({"streams": n, "config": name, "rates": rs,
                     "median": statistics.median(rs), "ratios": per_pass,
                     "ratio": statistics.median(per_pass) if per_pass else None,
                     "verdict": verdict(per_pass, control) if judged else "-"})
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
    lines = ["# The arm policy's constants, swept", "",
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
              title="Arm policy constants (median of per-pass ratios)")


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
    ap.add_argument("--name", default="arm_policy_sweep",
                    help="the report's file name (without .md, .json, .png)")
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
    engines = {}
    for c in configs(sweeps):
        with applied(c):
            engines[c] = SpecEngine.from_pool_file(args.pool, config)
    first = next(iter(engines.values()))
    prompts = load_prompts(args.pool, first.tokenizer, PER_DOMAIN, 200)
    for c, engine in engines.items():  # first steps (shapes, in-place timings), then forgotten
        with applied(c):
            run_group(engine, prompts[:1], 4)
            engine.forget_costs()
    levels = [int(x) for x in args.levels.split(",")]
    rows = measure(engines, prompts, levels, args.prompts, args.max_new, args.passes, args.seed)
    command = " ".join(["python -m bench.learner.arm_policy_sweep"]
                       + (["--quick"] if args.quick else [])
                       + [f"--sweep {s}" for s in args.sweep if s not in SWEEPS]
                       + ([f"--name {args.name}"] if args.name != "arm_policy_sweep" else []))
    meta = {"command": command,
            "machine": describe_machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "dtype": str(dtype), "threads": args.threads, "prompts": args.prompts,
            "max_new": args.max_new, "passes": args.passes, "sweeps": args.sweep}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / args.name
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(render(rows, meta))
    plot(rows, out.with_suffix(".png"))
    print(render(rows, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
