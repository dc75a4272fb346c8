"""The paper's benchmark on our pool (`hedgespec bench`): every method on the same held-out
prompts in one run, so ratios are measured side by side.

Methods: plain decoding, the generalist only (EAGLE), each specialist only, UCBSpec, EXP3Spec,
HedgeSpec (NormalHedge + acceptance-length loss), HedgeSpec variants (AdaNormalHedge; the
acceptance-probability loss), and an oracle that uses each request's best fixed drafter in
hindsight (computed from the fixed-drafter runs). Learners live per request, so the mixed
workload (domains interleaved request by request) and the per-domain workloads are the same
requests grouped differently.

Also: evaluation-phase share of round time, cumulative regret curves, estimator calibration
(ÂL vs realised), MAT vs pool size (N = 2..32, padding the pool with perturbed copies), and
the estimator variants side by side (`estimator_metrics`): calibration of the chosen
drafter's ÂL (mean |ÂL - realised|, least-squares slope of realised on ÂL), ranking (Spearman
correlation between each drafter's mean ÂL and its realised MAT when it runs alone on the
same prompts) and MAT against the oracle.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from bench.prompts import Prompt
from core.config import SamplingParams
from core.engine import SpecEngine
from core.model.eagle3 import Eagle3Drafter
from core.speculation.model_free.kinds import make_model_free


@dataclass
class Run:
    method: str
    prompt: Prompt
    tokens: int
    rounds: int
    wall_s: float
    eval_s: float
    round_s: float
    regret_curve: list[float] = field(default_factory=list)
    estimates: list[tuple[float, int]] = field(default_factory=list)
    drafters: list[str | None] = field(default_factory=list)
    est_len_sum: dict[str, float] = field(default_factory=dict)  # Σ ÂL_d over the windows
    # Under the time loss: the regret in seconds after each costed window.
    regret_seconds_curve: list[float] = field(default_factory=list)
    plain_tokens: int = 0  # committed by plain rounds (the time loss's plain arm)

    @property
    def mat(self) -> float:
        """Tokens per speculative round, as StatsSnapshot.mean_acceptance_length: the prefill's
        token and the plain rounds' tokens are not the rounds'."""
        return mat_of(self.tokens - 1 - self.plain_tokens, self.rounds, self.plain_tokens)


def fresh_model_free(engine: SpecEngine) -> None:
    """Every model-free member replaced by an empty one (same id, kind and parameters). The
    suffix cache learns each answer it sees and a benchmark's methods answer the same prompts,
    so a member left warm would draft an earlier method's (greedy: identical) answers: MAT 4.8
    instead of 1.8 for HedgeSpec in a served_sampling run that reused them."""
    for did, member in list(engine.snapshot.free.items()):
        engine.add_model_free(did, make_model_free(member.kind, dict(member.params)))


def run_method(engine: SpecEngine, prompts: Iterable[Prompt], method: str, policy: str,
               max_new_tokens: int, temperature: float = 0.0) -> list[Run]:
    """Each prompt once, stopping at EOS as served; when sampling, prompt i uses seed i for
    every method (verification is lossless, so each method's text follows the target law).
    The model-free members start empty (`fresh_model_free`) and learn over the prompts."""
    fresh_model_free(engine)
    runs = []
    for i, p in enumerate(prompts):
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=i)
        t0 = time.perf_counter()
        ids, st = engine.generate_ids(p.ids, params, policy)
        wall = time.perf_counter() - t0
        round_s = st.time_draft_s + st.time_verify_s + st.time_evaluate_s + st.time_bookkeeping_s
        runs.append(Run(method, p, len(ids), st.rounds, wall, st.time_evaluate_s, round_s,
                        list(st.regret_curve), list(st.estimates), list(st.drafter_per_round),
                        dict(st.est_len_sum), list(st.regret_seconds_curve), st.plain_tokens))
    return runs


def variant(engine: SpecEngine, drafters: dict[str, Eagle3Drafter] | None = None,
            **selector: Any) -> SpecEngine:
    """An engine sharing the target (and the pool's members, model-free ones included) with a
    different selector, or over `drafters` instead."""
    cfg = replace(engine.config, selector=replace(engine.config.selector, **selector))
    members = drafters if drafters is not None else dict(engine.snapshot.members)
    return SpecEngine(engine.target, members, cfg, engine.model_name)  # type: ignore[arg-type]


def perturbed(drafter: Eagle3Drafter, seed: int, scale: float) -> Eagle3Drafter:
    """A copy of `drafter` with Gaussian noise (relative to each tensor's RMS) on its weights."""
    clone = Eagle3Drafter(drafter.cfg, next(iter(drafter._shared_embed), None))
    clone.load_state_dict(drafter.state_dict())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in clone.parameters():
            rms = p.float().pow(2).mean().sqrt()
            p.add_((torch.randn(p.shape, generator=gen) * rms * scale).to(p.dtype))
    return clone.to(drafter.fc.weight.device).eval().requires_grad_(False)


def padded_pool(base: dict[str, Eagle3Drafter], n: int, scale: float) -> dict[str, Eagle3Drafter]:
    """The first n drafters of base, then perturbed copies cycling through base."""
    ids = list(base)
    pool = {i: base[i] for i in ids[:n]}
    k = 0
    while len(pool) < n:
        src = ids[k % len(ids)]
        pool[f"{src}~{k}"] = perturbed(base[src], seed=1000 + k, scale=scale)
        k += 1
    return pool


def mat_of(spec_tokens: int, spec_rounds: int, plain_tokens: int) -> float:
    """Tokens per speculative round; a method that drafted nothing (plain decoding: every round
    plain, core/__init__.py) commits one token a pass, MAT 1, as the server reports it."""
    if spec_rounds:
        return spec_tokens / spec_rounds
    return 1.0 if plain_tokens else 0.0


def summarize(runs: list[Run]) -> dict[str, float]:
    """A method's totals: MAT over its speculative rounds, as Run.mat (the plain arm's rounds,
    one token each, counted apart: `plain_share` of all its target passes)."""
    tokens = sum(r.tokens for r in runs)
    rounds = sum(r.rounds for r in runs)
    plain = sum(r.plain_tokens for r in runs)
    wall = sum(r.wall_s for r in runs)
    round_s = sum(r.round_s for r in runs)
    return {
        "mat": mat_of(tokens - len(runs) - plain, rounds, plain),
        "plain_share": plain / (plain + rounds) if plain + rounds else 0.0,
        "tokens_per_s": tokens / wall if wall else 0.0,
        "eval_share": sum(r.eval_s for r in runs) / round_s if round_s else 0.0,
        "requests": len(runs),
        "tokens": tokens,
    }


def oracle_runs(fixed: dict[str, list[Run]]) -> list[Run]:
    """Per request, the fixed drafter with the best realised MAT (ties: faster)."""
    per_request = zip(*fixed.values(), strict=True)
    return [replace(max(rs, key=lambda r: (r.mat, -r.wall_s)), method="oracle")
            for rs in per_request]


def calibration_error(runs: list[Run]) -> dict[str, float]:
    """Mean |ÂL - realised| of the chosen drafter, and the slope of realised on ÂL (1 = a
    calibrated estimator; near 0 = ÂL says nothing about the round)."""
    pairs = [(est, float(real)) for r in runs for est, real in r.estimates]
    if not pairs:
        return {"mae": float("nan"), "slope": float("nan"), "windows": 0}
    est = [e for e, _ in pairs]
    real = [x for _, x in pairs]
    mean_e, mean_r = sum(est) / len(est), sum(real) / len(real)
    var = sum((e - mean_e) ** 2 for e in est)
    cov = sum((e - mean_e) * (x - mean_r) for e, x in pairs)
    return {"mae": sum(abs(e - x) for e, x in pairs) / len(pairs),
            "slope": cov / var if var > 0 else float("nan"), "windows": len(pairs)}


def mean_estimates(runs: list[Run]) -> dict[str, float]:
    """Each drafter's mean ÂL over every window of the runs."""
    windows = sum(len(r.regret_curve) for r in runs)
    totals: dict[str, float] = {}
    for r in runs:
        for d, v in r.est_len_sum.items():
            totals[d] = totals.get(d, 0.0) + v
    return {d: v / windows for d, v in totals.items()} if windows else {}


def spearman(xs: list[float], ys: list[float]) -> float:
    """Rank correlation (average ranks for ties); nan when either side is constant."""
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(rx)
    if n < 2:
        return float("nan")
    mx, my = sum(rx) / n, sum(ry) / n
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    if sx == 0 or sy == 0:
        return float("nan")
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True)) / (sx * sy)


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2
        i = j + 1
    return ranks


def estimator_metrics(variant_runs: list[Run], alone: dict[str, list[Run]], oracle: list[Run],
                      depth: int) -> dict[str, float]:
    """Calibration, ranking and MAT of one HedgeSpec variant (see the module docstring).
    alone: each drafter's fixed-policy runs on the same prompts (keys: drafter ids)."""
    means = mean_estimates(variant_runs)
    ids = [d for d in alone if d in means]
    mat = summarize(variant_runs)["mat"]
    oracle_mat = summarize(oracle)["mat"]
    return {**calibration_error(variant_runs),
            "rank_corr": spearman([means[d] for d in ids],
                                  [summarize(alone[d])["mat"] for d in ids]),
            "mat": mat, "mat_vs_oracle": mat / oracle_mat if oracle_mat else 0.0,
            "saturated_share": _saturated_share(variant_runs, depth)}


def _saturated_share(runs: list[Run], depth: int) -> float:
    """Share of the chosen drafter's windows at the ceiling ÂL = K+1 (a saturated estimator
    puts most windows there whatever they realise)."""
    pairs = [est for r in runs for est, _ in r.estimates]
    if not pairs:
        return float("nan")
    return sum(1 for e in pairs if e >= depth + 1 - 1e-9) / len(pairs)
