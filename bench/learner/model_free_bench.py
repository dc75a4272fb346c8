"""Drafters with no weights (`ngram`, `suffix`; core/speculation/model_free/) beside the EAGLE-3
pool, side by side in one run (issue 39, item 6). Writes bench/results/model_free.{md,json,png}.

    python -m bench.learner.model_free_bench [--quick] [--pool demo/pool/pool.json] [--per-domain 2]
        [--copy-per-kind 2] [--max-new-tokens 48] [--copy-max-new-tokens 64] [--streams 8]
        [--stream-tokens 48] [--threads 2] [--dtype auto] [--out bench/results] [--json]

Rows (greedy, one stream, each request alone, stopping at EOS as served): plain decoding; each
drafter alone (`fixed:<id>` for every EAGLE-3 drafter of the pool and for the `ngram` and
`suffix` drafters: the pool's own model-free members, `lookup` and `suffix` in the shipped
pool.json, else members of default parameters named `ngram` and `suffix`); the prompt router
(policy `router`, when the pool ships one); HedgeSpec (NormalHedge) over the EAGLE-3 drafters
only; HedgeSpec over the whole pool (EAGLE-3 + ngram + suffix); hybrid (the same, with the
ngram member's chain grafted at the root of every EAGLE-3 tree chosen, EngineConfig.hybrid);
the per-request oracle over the whole pool (each request's best fixed drafter by MAT,
bench/learner/hedgespec_bench.oracle_runs).
These HedgeSpec rows learn with the acceptance loss (SelectorConfig.loss "length"), which
drafts every round: they compare drafters. Then the pool's default sampling (its
generation_config: temperature 0.2, top_p 0.9 on the demo pool; prompt i seeded with i) for
plain and both HedgeSpec rows; then N concurrent streams (batched steps, HedgeSpec over the
whole pool with the time loss as `hedgespec serve` runs it: plain decoding an extra arm of each
request's learner) against plain decoding of the same streams.

Workloads: `held_out`, the demo pool's held-out prompts of every domain interleaved request by
request (as bench/prompts.load_prompts); `copy_heavy`, bench/data/copy_heavy.jsonl (code
edits returning the whole function, answers quoting their context, summaries, multi-turn JSON
extraction; built by bench/learner/build_copy_heavy.py from held-out text,
bench/data/SOURCES.md), kinds interleaved request by request.

The suffix drafter's cache of finished responses warms up as requests finish: every method
(and every pass of the stream rows) starts with fresh model-free drafters, so no method drafts
from responses another method produced. Within a method the cache learns from that method's
earlier requests, as a server's would.

Sizes: plain decoding and a single EAGLE drafter run about 20-23 tokens/s on an idle two-core
CPU (bf16), a 300-token prefill about 0.35 s, so each greedy row of a workload costs about its
prompts x new tokens / 22 seconds, and a workload has 15 of them (plain twice, 8 EAGLE-3
drafters, ngram, suffix, router, two HedgeSpec rows), the sampled rows 3 more, the stream rows
about a minute. The defaults (14 held-out prompts of 48 tokens, 8 copy-heavy of 64; 8 streams of
48) come to about 15-17 minutes by that estimate (the full run was not timed when this was
written; --max-new-tokens 40 saves about a minute); 3-4 prompts per domain at 96 tokens would
take about an hour. The report prints the sizes and the elapsed time. Run it on an idle
machine: on a loaded one the same row's tokens/s swings several-fold between passes.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from bench.learner.hedgespec_bench import Run, mat_of, oracle_runs, summarize
from bench.learner.model_free_methods import EAGLE_ONLY, HYBRID, WHOLE_POOL, WORKLOADS
from bench.learner.model_free_report import write_report
from bench.machine import describe_machine, repo_path
from bench.paths import DATA, RESULTS
from bench.prompts import DEFAULT_POOL, Prompt, load_prompts
from bench.report_cli import run_and_report
from core.config import EngineConfig, SamplingParams, served_selector, served_tree
from core.engine import SpecEngine
from core.model.precision import auto_dtype
from core.speculation.drafter_pool import PoolSnapshot
from core.speculation.model_free.base import ModelFreeDrafter
from core.speculation.model_free.kinds import make_model_free

COPY_HEAVY = DATA / "copy_heavy.jsonl"
MODEL_FREE_KINDS = ("ngram", "suffix")
HEDGE = "normalhedge"
# Stream groups the time loss's engine runs before the stream rows, so that its cost model
# (core/selection/arm_costs.py) has measured the batch size, as bench/learner/time_loss.py
# (quick: 1).
WARMUP_GROUPS = 2
Log = Callable[[str], None]


@dataclass(frozen=True)
class FreeSpec:
    """A model-free pool member: built afresh for every method (its caches start empty)."""

    id: str
    kind: str
    params: dict[str, int] = field(default_factory=dict)

    def build(self) -> ModelFreeDrafter:
        return make_model_free(self.kind, self.params)


# -- prompts -------------------------------------------------------------------------------------
def load_copy_heavy(path: Path, tokenizer: Any, per_kind: int, max_tokens: int,
                    log: Log = print) -> list[Prompt]:
    """The copy-heavy records, chat-formatted (every turn), kinds interleaved request by request;
    a record longer than max_tokens is left out (and said)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    by_kind: dict[str, list[Prompt]] = {}
    for r in rows:
        text = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True,
                                             tokenize=False)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) > max_tokens:
            log(f"  copy-heavy {r['id']}: {len(ids)} prompt tokens > {max_tokens}, left out")
            continue
        by_kind.setdefault(r["kind"], []).append(Prompt(r["id"], r["kind"], ids))
    return [rs[i] for i in range(per_kind) for rs in by_kind.values() if i < len(rs)]


# -- engines -------------------------------------------------------------------------------------
def free_specs(engine: SpecEngine) -> list[FreeSpec]:
    """The pool's own model-free members (their ids and parameters), then a default-parameter
    member of each kind the pool lacks, named by its kind."""
    specs = [FreeSpec(did, d.kind, dict(d.params)) for did, d in engine.snapshot.free.items()]
    have = {s.kind for s in specs}
    return specs + [FreeSpec(k, k) for k in MODEL_FREE_KINDS if k not in have]


def engine_over(base: SpecEngine, members: dict[str, Any], config: EngineConfig) -> SpecEngine:
    """An engine over the base's target (router and sampling defaults kept) with `members`; the
    base's stacked EAGLE-3 groups are shared, not stacked again (as a pool change does)."""
    eng = SpecEngine(base.target, {}, config, base.model_name)
    eng.snapshot = PoolSnapshot(members, base.snapshot.groups)
    eng.router, eng.pool_sampling = base.router, dict(base.pool_sampling)
    return eng


def refresh(engine: SpecEngine, specs: list[FreeSpec]) -> None:
    """Replace every model-free member by a fresh one (same id, order and parameters)."""
    for s in specs:
        engine.add_model_free(s.id, s.build())


@dataclass
class Engines:
    eagle: SpecEngine  # the EAGLE-3 drafters only
    full: SpecEngine  # EAGLE-3 + model-free
    specs: list[FreeSpec]
    hybrid: SpecEngine | None = None  # the whole pool, the ngram member grafted onto EAGLE trees

    @property
    def eagle_ids(self) -> list[str]:
        return list(self.eagle.snapshot.drafters)

    def fresh_full(self) -> SpecEngine:
        refresh(self.full, self.specs)
        return self.full

    def fresh_hybrid(self) -> SpecEngine:
        assert self.hybrid is not None
        refresh(self.hybrid, self.specs)
        return self.hybrid


def build_engines(base: SpecEngine) -> Engines:
    eagle = dict(base.snapshot.drafters)
    specs = free_specs(base)
    full = engine_over(base, {**eagle, **{s.id: s.build() for s in specs}}, base.config)
    graft = next(s.id for s in specs if s.kind == "ngram")
    hybrid = engine_over(base, {**eagle, **{s.id: s.build() for s in specs}},
                         replace(base.config, hybrid=graft))
    return Engines(engine_over(base, eagle, base.config), full, specs, hybrid)


# -- one row -------------------------------------------------------------------------------------
@dataclass
class TimedRun(Run):
    ttft_s: float = 0.0  # prefill: the request's start to its first token


def run_rows(engine: SpecEngine, prompts: list[Prompt], method: str, policy: str,
             params: Callable[[int], SamplingParams]) -> list[Run]:
    """Each prompt alone, in order (prompt i with params(i)), as bench/learner/hedgespec_bench
    does."""
    runs: list[Run] = []
    for i, p in enumerate(prompts):
        ids: list[int] = []
        stats, first = None, None
        t0 = time.perf_counter()
        for out in engine.generate(p.ids, params(i), policy):
            if out.token_ids and first is None:
                first = time.perf_counter() - t0
            ids += out.token_ids
            stats = out.stats
        wall = time.perf_counter() - t0
        st = stats
        assert st is not None
        round_s = st.time_draft_s + st.time_verify_s + st.time_evaluate_s + st.time_bookkeeping_s
        runs.append(TimedRun(method, p, len(ids), st.rounds, wall, st.time_evaluate_s, round_s,
                             drafters=list(st.drafter_per_round), plain_tokens=st.plain_tokens,
                             ttft_s=first or 0.0))
    return runs


def decode_rate(runs: list[Run]) -> float:
    """Tokens after the first over the time after the first (prefill left out)."""
    tokens = sum(r.tokens - 1 for r in runs)
    wall = sum(r.wall_s - getattr(r, "ttft_s", 0.0) for r in runs)
    return tokens / wall if wall > 0 else 0.0


def greedy(max_new: int) -> Callable[[int], SamplingParams]:
    return lambda i: SamplingParams(max_new_tokens=max_new)


def sampled(max_new: int, temperature: float, top_p: float) -> Callable[[int], SamplingParams]:
    return lambda i: SamplingParams(max_new_tokens=max_new, temperature=temperature,
                                    top_p=top_p, seed=i)


def greedy_rows(eng: Engines, prompts: list[Prompt], max_new: int,
                log: Log) -> tuple[dict[str, list[Run]], list[float]]:
    """Every greedy row of one workload; plain runs first and last (its two passes)."""
    runs: dict[str, list[Run]] = {}
    passes: list[float] = []
    params = greedy(max_new)

    def go(name: str, engine: SpecEngine, policy: str) -> list[Run]:
        t0 = time.perf_counter()
        rs = run_rows(engine, prompts, name, policy, params)
        s = summarize(rs)
        log(f"  {name:<22} MAT {s['mat']:.2f}  {s['tokens_per_s']:6.1f} tokens/s  "
            f"({time.perf_counter() - t0:.0f}s)")
        return rs

    first = go("plain", eng.eagle, "none")
    for did in eng.eagle_ids:
        runs[f"fixed:{did}"] = go(f"fixed:{did}", eng.eagle, f"fixed:{did}")
    for s in eng.specs:
        runs[f"fixed:{s.id}"] = go(f"fixed:{s.id}", eng.fresh_full(), f"fixed:{s.id}")
    if eng.eagle.router is not None:
        runs["router"] = go("router", eng.eagle, "router")
    runs[EAGLE_ONLY] = go(EAGLE_ONLY, eng.eagle, HEDGE)
    runs[WHOLE_POOL] = go(WHOLE_POOL, eng.fresh_full(), HEDGE)
    runs[HYBRID] = go(HYBRID, eng.fresh_hybrid(), HEDGE)
    second = go("plain (2nd pass)", eng.eagle, "none")
    passes = [summarize(first)["tokens_per_s"], summarize(second)["tokens_per_s"]]
    runs = {"plain": first + second, **runs}  # both passes: the baseline is their mean
    alone = {name: rs for name, rs in runs.items() if name.startswith("fixed:")}
    runs["oracle"] = oracle_runs(alone)
    return runs, passes


def sampled_rows(eng: Engines, prompts: list[Prompt], max_new: int, temperature: float,
                 top_p: float, log: Log) -> dict[str, list[Run]]:
    params = sampled(max_new, temperature, top_p)
    out = {}
    for name, engine, policy in (("plain", eng.eagle, "none"), (EAGLE_ONLY, eng.eagle, HEDGE),
                                 (WHOLE_POOL, eng.fresh_full(), HEDGE)):
        out[name] = run_rows(engine, prompts, name, policy, params)
        s = summarize(out[name])
        log(f"  {name + ' (sampled)':<22} MAT {s['mat']:.2f}  {s['tokens_per_s']:6.1f} tokens/s")
    return out


# -- concurrent streams --------------------------------------------------------------------------
def run_group(engine: SpecEngine, prompts: list[Prompt], policy: str,
              max_new: int) -> dict[str, Any]:
    """The prompts started together (greedy, ignore_eos, so every stream commits max_new) and
    stepped to completion: aggregate tokens/s and the speculative rounds' MAT."""
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"s{i}", p.ids, params, policy)
    tokens, last = 0, {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.error:
                raise RuntimeError(out.error)
            tokens += len(out.token_ids)
            last[out.request_id] = out.stats
    wall = time.perf_counter() - t0
    rounds = sum(s.rounds for s in last.values())
    plain = sum(s.plain_rounds for s in last.values())  # the time learner's plain arm
    spec = sum(s.completion_tokens - s.prefill_tokens - s.plain_tokens for s in last.values())
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall if wall else 0.0,
            "mat": mat_of(spec, rounds, plain),
            "plain_step_share": plain / (rounds + plain) if rounds + plain else 0.0}


def stream_rows(base: SpecEngine, eng: Engines, prompts: list[Prompt], n: int, max_new: int,
                warmup: int, log: Log) -> dict[str, Any]:
    """Plain vs HedgeSpec over the whole pool with the time loss (the served default), n
    streams, in the order plain, HedgeSpec, HedgeSpec, plain; each mode's tokens/s is the mean
    of its two passes."""
    config = replace(base.config, selector=replace(base.config.selector, loss="time"),
                     max_running=max(16, n))
    engine = engine_over(base, dict(eng.full.snapshot.members), config)
    group = [prompts[i % len(prompts)] for i in range(n)]
    for _ in range(warmup):  # what a server that has been up has done: its cost model measured
        refresh(engine, eng.specs)
        run_group(engine, group, HEDGE, max_new)
    fitted = engine.costs.model(n) is not None
    passes: dict[str, list[dict[str, Any]]] = {"plain": [], WHOLE_POOL: []}
    for mode in ("plain", WHOLE_POOL, WHOLE_POOL, "plain"):
        refresh(engine, eng.specs)
        cell = run_group(engine, group, "none" if mode == "plain" else HEDGE, max_new)
        passes[mode].append(cell)
        log(f"  {n} streams {mode:<16} {cell['tokens_per_s']:6.1f} tokens/s  "
            f"MAT {cell['mat']:.2f}")
    mean = {m: sum(c["tokens_per_s"] for c in cs) / len(cs) for m, cs in passes.items()}
    return {"streams": n, "max_new_tokens": max_new, "warmup_groups": warmup,
            "time_model": "fitted" if fitted else "not fitted (the loss falls back to 1/ÂL)",
            "passes": passes,
            "tokens_per_s": mean, "x_plain": mean[WHOLE_POOL] / mean["plain"]
            if mean["plain"] else 0.0}


# -- tables --------------------------------------------------------------------------------------
def table(runs: dict[str, list[Run]]) -> dict[str, dict[str, float]]:
    """Each row's MAT and tokens/s, and its ratios to plain, to HedgeSpec over the EAGLE-3
    drafters (tokens/s) and to the oracle (MAT)."""
    s = {name: {**summarize(rs), "decode_tokens_per_s": decode_rate(rs)}
         for name, rs in runs.items()}
    plain = s["plain"]["tokens_per_s"]
    plain_decode = s["plain"]["decode_tokens_per_s"]
    eagle = s[EAGLE_ONLY]["tokens_per_s"] if EAGLE_ONLY in s else 0.0
    oracle = s["oracle"]["mat"] if "oracle" in s else 0.0
    for row in s.values():
        row["x_plain"] = row["tokens_per_s"] / plain if plain else 0.0
        row["x_plain_decode"] = (row["decode_tokens_per_s"] / plain_decode if plain_decode
                                 else 0.0)
        row["x_hedgespec_eagle"] = row["tokens_per_s"] / eagle if eagle else 0.0
        row["mat_x_oracle"] = row["mat"] / oracle if oracle else 0.0
    return s


def drafter_share(runs: list[Run]) -> dict[str, float]:
    """Share of the speculative rounds each drafter drafted (None: nothing drafted)."""
    counts: dict[str, int] = {}
    for r in runs:
        for d in r.drafters:
            counts[str(d)] = counts.get(str(d), 0) + 1
    total = sum(counts.values())
    return {d: c / total for d, c in sorted(counts.items(), key=lambda kv: -kv[1])} if total else {}


def per_kind_mat(runs: dict[str, list[Run]], names: list[str]) -> dict[str, dict[str, float]]:
    kinds = list(dict.fromkeys(r.prompt.domain for r in runs["plain"]))
    return {k: {n: summarize([r for r in runs[n] if r.prompt.domain == k])["mat"] for n in names}
            for k in kinds}


def check_targets(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's targets (issue 39, item 6), each met or missed."""
    w, smp, st = r["workloads"], r["sampling"], r["streams"]
    checks: dict[str, tuple[float, float]] = {}
    for name, need in (("held_out", 1.5), ("copy_heavy", 2.0)):
        checks[f"{name}: whole-pool HedgeSpec tokens/s >= {need}x plain"] = (
            w[name]["methods"][WHOLE_POOL]["x_plain"], need)
    for name in WORKLOADS:
        m = w[name]["methods"][WHOLE_POOL]
        checks[f"{name}: whole-pool HedgeSpec tokens/s >= 1.25x HedgeSpec EAGLE-only"] = (
            m["x_hedgespec_eagle"], 1.25)
        checks[f"{name}: whole-pool HedgeSpec MAT >= 0.95x oracle"] = (m["mat_x_oracle"], 0.95)
    for name in WORKLOADS:
        s = smp[name]
        checks[f"{name}: default sampling, whole-pool HedgeSpec tokens/s >= 1.3x plain"] = (
            s[WHOLE_POOL]["x_plain"], 1.3)
    for name in WORKLOADS:
        checks[f"{name}: {st[name]['streams']} streams, HedgeSpec (time loss) tokens/s "
               ">= 1.0x plain"] = (st[name]["x_plain"], 1.0)
    return {k: {"value": v, "threshold": t, "met": v >= t} for k, (v, t) in checks.items()}


# -- run -----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.learner.model_free_bench",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pool", type=Path, default=DEFAULT_POOL)
    ap.add_argument("--copy-heavy", type=Path, default=COPY_HEAVY,
                    help="the copy-heavy workload (JSON lines: id, kind, messages)")
    ap.add_argument("--quick", action="store_true",
                    help="one prompt per domain and kind, 8 tokens: a smoke run")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--per-domain", type=int, default=None,
                    help="held-out prompts per domain (default 2; quick 1)")
    ap.add_argument("--copy-per-kind", type=int, default=None,
                    help="copy-heavy prompts per kind (default 2)")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="new tokens per held-out request (default 48)")
    ap.add_argument("--copy-max-new-tokens", type=int, default=None,
                    help="new tokens per copy-heavy request (default 64)")
    ap.add_argument("--max-prompt-tokens", type=int, default=160,
                    help="held-out prompts are cut to this many tokens (as hedgespec bench)")
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams of the last rows")
    ap.add_argument("--stream-tokens", type=int, default=None,
                    help="tokens per stream (default 48)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--dtype", default="auto", help="auto = what `hedgespec serve` picks here")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    q = args.quick
    args.per_domain = args.per_domain or (1 if q else 2)
    args.copy_per_kind = args.copy_per_kind or (1 if q else 2)
    args.max_new_tokens = args.max_new_tokens or (8 if q else 48)
    args.copy_max_new_tokens = args.copy_max_new_tokens or (8 if q else 64)
    args.stream_tokens = args.stream_tokens or (4 if q else 48)
    args.warmup_groups = 1 if q else WARMUP_GROUPS
    return args


def run_all(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    dtype = auto_dtype() if args.dtype == "auto" else args.dtype
    # The acceptance loss for the one-stream rows, which compare drafters (every HedgeSpec row
    # drafts every round); the stream rows switch to the served time loss (stream_rows).
    selector = replace(served_selector(args.device), loss="length")
    config = EngineConfig(max_context=4096, device=args.device, dtype=dtype,
                          tree=served_tree(args.device), selector=selector)
    base = SpecEngine.from_pool_file(args.pool, config)
    eng = build_engines(base)
    longest = max(args.max_new_tokens, args.copy_max_new_tokens, args.stream_tokens)
    prompts = {
        "held_out": load_prompts(args.pool, base.tokenizer, args.per_domain,
                                 args.max_prompt_tokens),
        "copy_heavy": load_copy_heavy(args.copy_heavy, base.tokenizer, args.copy_per_kind,
                                      eng.full.max_context - longest - 1, log),
    }
    max_new = {"held_out": args.max_new_tokens, "copy_heavy": args.copy_max_new_tokens}
    defaults = base.sampling_defaults
    temperature, top_p = float(defaults.get("temperature", 0.2)), float(defaults.get("top_p", 0.9))
    log(f"pool {args.pool}: EAGLE-3 {eng.eagle_ids}, model-free "
        f"{[(s.id, s.kind) for s in eng.specs]}; {dtype}, {args.threads} threads, tree "
        f"{config.tree}; held-out {len(prompts['held_out'])} x {max_new['held_out']} tokens, "
        f"copy-heavy {len(prompts['copy_heavy'])} x {max_new['copy_heavy']} tokens")
    for engine in (eng.eagle, eng.fresh_full()):  # warm-up
        engine.generate_ids(prompts["held_out"][0].ids, SamplingParams(max_new_tokens=4), HEDGE)
        engine.forget_costs()  # it measured lazy set-up, not the load
    results: dict[str, Any] = {"workloads": {}, "sampling": {"temperature": temperature,
                                                             "top_p": top_p},
                               "streams": {}, "_runs": {}}
    for name in WORKLOADS:
        log(f"{name}: greedy, one stream")
        runs, passes = greedy_rows(eng, prompts[name], max_new[name], log)
        methods = table(runs)
        spread = abs(passes[0] - passes[1]) / (sum(passes) / 2) if sum(passes) else 0.0
        results["workloads"][name] = {
            "prompts": len(prompts[name]), "max_new_tokens": max_new[name],
            "kinds": list(dict.fromkeys(p.domain for p in prompts[name])),
            "methods": methods, "plain_passes": passes, "plain_spread": spread,
            "drafter_share": {WHOLE_POOL: drafter_share(runs[WHOLE_POOL]),
                              EAGLE_ONLY: drafter_share(runs[EAGLE_ONLY]),
                              HYBRID: drafter_share(runs[HYBRID])},
            "per_kind_mat": per_kind_mat(runs, ["plain", *[f"fixed:{s.id}" for s in eng.specs],
                                                EAGLE_ONLY, WHOLE_POOL, HYBRID, "oracle"]),
        }
        results["_runs"][name] = runs
    for name in WORKLOADS:
        log(f"{name}: default sampling (temperature {temperature}, top_p {top_p})")
        results["sampling"][name] = table(sampled_rows(eng, prompts[name], max_new[name],
                                                       temperature, top_p, log))
    for name in WORKLOADS:
        log(f"{name}: {args.streams} concurrent streams")
        results["streams"][name] = stream_rows(base, eng, prompts[name], args.streams,
                                               args.stream_tokens, args.warmup_groups, log)
    tree = config.tree
    results["config"] = {
        "command": "python -m bench.learner.model_free_bench" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": describe_machine(),
        "pool": repo_path(args.pool), "model": base.model_name, "eagle": eng.eagle_ids,
        "model_free": {s.id: {"kind": s.kind, "params": dict(s.build().params)}
                       for s in eng.specs},
        "router": base.router is not None, "dtype": dtype, "threads": args.threads,
        "device": args.device, "tree": [tree.top_k, tree.depth, tree.total_tokens],
        "eval_every": config.selector.eval_every,
        "prompt_windows": config.selector.prompt_windows, "per_domain": args.per_domain,
        "copy_per_kind": args.copy_per_kind, "max_prompt_tokens": args.max_prompt_tokens,
        "copy_heavy": repo_path(args.copy_heavy), "torch": torch.__version__,
    }
    results["targets"] = check_targets(results)
    results["elapsed_s"] = time.perf_counter() - t_start
    return results


def main(argv: list[str] | None = None) -> int:
    return run_and_report(run_all, write_report, parse_args(argv), "model_free.md")


if __name__ == "__main__":
    raise SystemExit(main())
