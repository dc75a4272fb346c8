"""The pool report: the HedgeSpec paper's Table 1 in miniature, greedy and sampled.

MAT (mean accepted tokens per verification pass, bonus token included) of every drafter on
every domain's held-out prompts, measured with the real speculative engine
(`core.engine.SpecEngine`, policy `fixed:<drafter>`), once with greedy verification and once
at temperature 1 (seeded per prompt, so every drafter sees the same request seeds). Per-prompt
token and round counts are kept so that any slice of a table can be recomputed, and so that
the per-request oracle (the best drafter for each prompt, in hindsight) can be computed.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from core.config import EngineConfig, SamplingParams, TreeConfig
from core.engine import SpecEngine
from core.pool_file import load_pool_file
from demo.records import read_jsonl


@dataclass(frozen=True)
class ReportSpec:
    """How the table is measured: the tree, the decoding and how many prompts per domain."""

    top_k: int = 4
    depth: int = 6  # deep enough that formulaic domains (SQL) do not saturate at depth + 1
    total_tokens: int = 24
    max_new_tokens: int = 48
    prompts_per_domain: int = 3  # x 8 drafters x 7 domains x 2 temperatures: ~10 min on 2 cores
    temperatures: tuple[float, ...] = (0.0, 1.0)
    dtype: str = "auto"  # as `hedgespec serve` runs on this CPU (demo/precision.py)

    @property
    def tree(self) -> TreeConfig:
        return TreeConfig(top_k=self.top_k, depth=self.depth, total_tokens=self.total_tokens)


@dataclass(frozen=True)
class Cell:
    """One (drafter, domain) cell: committed tokens and verification rounds per prompt."""

    tokens: tuple[int, ...]
    rounds: tuple[int, ...]

    @property
    def mat(self) -> float:
        return sum(self.tokens) / max(1, sum(self.rounds))


def open_engine(pool_json: Path, spec: ReportSpec) -> SpecEngine:
    from demo.precision import target_dtype

    dtype = str(target_dtype(spec.dtype)).removeprefix("torch.")
    # evaluate_all=False: a fixed policy needs no counterfactual catch-up of the other drafters.
    return SpecEngine.from_pool_file(pool_json,
                                     EngineConfig(tree=spec.tree, evaluate_all=False, dtype=dtype))


def chat_prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """A user prompt rendered with the target's own chat template, as the gateway does."""
    messages = [{"role": "user", "content": prompt}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def eval_prompt_ids(engine: SpecEngine, pool_dir: Path, domain: str, n: int) -> list[list[int]]:
    """The first n held-out prompts of a domain from `eval_prompts.jsonl`."""
    rows = [r for r in read_jsonl(pool_dir / "eval_prompts.jsonl") if r["domain"] == domain][:n]
    return [chat_prompt_ids(engine.tokenizer, r["prompt"]) for r in rows]


def measure_cell(
    engine: SpecEngine, drafter: str, prompts: Sequence[list[int]], max_new_tokens: int,
    temperature: float = 0.0,
) -> Cell:
    """Generation of every prompt with one fixed drafter (prompt i sampled with seed i)."""
    tokens, rounds = [], []
    for i, ids in enumerate(prompts):
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=i)
        _, stats = engine.generate_ids(ids, params, policy=f"fixed:{drafter}")
        # MAT counts the tokens of speculative rounds; the prefill's first token is not one.
        tokens.append(stats.completion_tokens - stats.prefill_tokens)
        rounds.append(stats.rounds)
    return Cell(tuple(tokens), tuple(rounds))


Job = tuple[str, str, float]  # drafter, domain, temperature


def measure_cells(
    pool_json: Path, jobs: Sequence[Job], spec: ReportSpec, progress: bool = True
) -> list[Cell]:
    """Measure (drafter, domain) cells in this process, single-threaded.

    Per-token decoding runs many tiny matmuls: one thread is faster than two (no
    synchronisation), and it stays fast when the cores are shared with other work.
    """
    torch.set_num_threads(1)
    engine = open_engine(pool_json, spec)
    domains = sorted({do for _, do, _ in jobs})
    prompts = {d: eval_prompt_ids(engine, pool_json.parent, d, spec.prompts_per_domain)
               for d in domains}
    bar = tqdm(jobs, desc="report (MAT)", unit="cell", disable=not progress)
    return [measure_cell(engine, dr, prompts[do], spec.max_new_tokens, t) for dr, do, t in bar]


def measure_table(
    pool_json: Path,
    drafters: Sequence[str],
    domains: Sequence[str],
    spec: ReportSpec,
    workers: int = 1,
    temperature: float = 0.0,
) -> dict[tuple[str, str], Cell]:
    """Every (drafter, domain) cell at one temperature."""
    cells = measure_jobs(pool_json, [(dr, do, temperature) for dr in drafters for do in domains],
                         spec, workers)
    return {(dr, do): cell for (dr, do, _), cell in cells.items()}


def measure_reports(
    pool_json: Path, drafters: Sequence[str], domains: Sequence[str], spec: ReportSpec,
    workers: int = 1,
) -> dict[float, dict[tuple[str, str], Cell]]:
    """One table per temperature of `spec`, measured together so the workers stay busy."""
    jobs = [(dr, do, t) for t in spec.temperatures for dr in drafters for do in domains]
    cells = measure_jobs(pool_json, jobs, spec, workers)
    return {t: {(dr, do): c for (dr, do, tt), c in cells.items() if tt == t}
            for t in spec.temperatures}


def measure_jobs(
    pool_json: Path, jobs: list[Job], spec: ReportSpec, workers: int = 1
) -> dict[Job, Cell]:
    """Every job's cell; `workers` single-threaded processes share the jobs."""
    if workers <= 1:
        threads = torch.get_num_threads()
        try:
            cells = measure_cells(pool_json, jobs, spec)
        finally:
            torch.set_num_threads(threads)
        return dict(zip(jobs, cells, strict=True))
    shards = [jobs[i::workers] for i in range(workers)]
    # spawn, not fork: forking a process whose OpenMP pool is running can deadlock.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [
            pool.submit(measure_cells, pool_json, shard, spec, i == 0)
            for i, shard in enumerate(shards)
        ]
        results = [f.result() for f in futures]
    return {job: cell for shard, res in zip(shards, results, strict=True)
            for job, cell in zip(shard, res, strict=True)}


def report_dict(
    cells: dict[tuple[str, str], Cell], drafters: Sequence[str], domains: Sequence[str],
    spec: ReportSpec, temperature: float = 0.0,
) -> dict[str, Any]:
    mat = [[round(cells[(dr, do)].mat, 4) for do in domains] for dr in drafters]
    report: dict[str, Any] = {
        "domains": list(domains),
        "drafters": list(drafters),
        "mat": mat,
        "average": [round(sum(row) / len(row), 4) for row in mat],
        "measurement": {
            "engine": "core.engine.SpecEngine, policy fixed:<drafter>",
            "temperature": temperature,
            "dtype": resolved_dtype(spec.dtype),
            "tree": {"top_k": spec.top_k, "depth": spec.depth, "total_tokens": spec.total_tokens},
            "max_new_tokens": spec.max_new_tokens,
            "prompts_per_domain": spec.prompts_per_domain,
            "prompts": "the first prompts_per_domain rows of each domain in eval_prompts.jsonl",
        },
        "per_prompt": {
            dr: {do: {"tokens": list(cells[(dr, do)].tokens),
                      "rounds": list(cells[(dr, do)].rounds)}
                 for do in domains}
            for dr in drafters
        },
    }
    report["checks"] = specialisation_checks(report)
    return report


def resolved_dtype(name: str) -> str:
    """The dtype name a table measured with `name` (e.g. "auto") runs in on this machine."""
    from demo.precision import target_dtype

    return str(target_dtype(name)).removeprefix("torch.")


def full_report(
    tables: dict[float, dict[tuple[str, str], Cell]], drafters: Sequence[str],
    domains: Sequence[str], spec: ReportSpec,
) -> dict[str, Any]:
    """The greedy table at the top level (the schema of earlier pools) and every sampled
    table under `sampling`, keyed by temperature."""
    greedy = report_dict(tables[0.0], drafters, domains, spec, 0.0)
    greedy["sampling"] = {
        str(t): report_dict(cells, drafters, domains, spec, t)
        for t, cells in tables.items() if t > 0
    }
    return greedy


def oracle_ratio(report: dict[str, Any], generalist: str = "generalist") -> float:
    """Per-request oracle MAT over the generalist's MAT on the mixed workload (every prompt of
    every domain): the oracle runs each prompt with the drafter that did best on it."""
    per = report["per_prompt"]
    tokens = rounds = 0
    for domain in report["domains"]:
        for i in range(len(per[generalist][domain]["rounds"])):
            runs = [(per[d][domain]["tokens"][i], per[d][domain]["rounds"][i]) for d in per]
            best = max(runs, key=lambda tr: tr[0] / max(1, tr[1]))
            tokens, rounds = tokens + best[0], rounds + best[1]
    g_tokens = sum(sum(per[generalist][d]["tokens"]) for d in report["domains"])
    g_rounds = sum(sum(per[generalist][d]["rounds"]) for d in report["domains"])
    return round((tokens / max(1, rounds)) / (g_tokens / max(1, g_rounds)), 4)


def specialisation_checks(report: dict[str, Any], generalist: str = "generalist") -> dict[str, Any]:
    """The pattern that makes drafter selection matter (HedgeSpec Table 1), with the issue's
    thresholds: each specialist >= 1.2x the generalist in its domain, the generalist ahead on
    average, and the per-request oracle >= 1.25x the generalist on the mixed workload."""
    drafters, domains, mat = report["drafters"], report["domains"], report["mat"]
    g = drafters.index(generalist)
    diag = {d: mat[drafters.index(d)][domains.index(d)] for d in domains if d in drafters}
    gain = {d: round(diag[d] / mat[g][domains.index(d)], 4) for d in diag}
    specialists = [i for i, d in enumerate(drafters) if d != generalist]
    spec_avg = sum(report["average"][i] for i in specialists) / len(specialists)
    oracle = oracle_ratio(report, generalist)
    return {
        "specialist_beats_generalist_in_domain": {d: gain[d] > 1.0 for d in diag},
        "specialist_gain_in_domain": gain,
        "specialist_gain_at_least_1_2": {d: gain[d] >= 1.2 for d in diag},
        "generalist_average": report["average"][g],
        "specialists_average": round(spec_avg, 4),
        "generalist_beats_specialists_on_average": report["average"][g] > spec_avg,
        "oracle_over_generalist": oracle,
        "oracle_at_least_1_25": oracle >= 1.25,
    }


def write_report(report: dict[str, Any], out_dir: Path) -> None:
    (out_dir / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Re-measure the MAT tables of an existing pool: `python -m demo.report --pool demo/pool`."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--pool", type=Path, required=True, help="directory holding pool.json")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=ReportSpec.prompts_per_domain)
    parser.add_argument("--out", type=Path, default=None, help="write the tables as JSON here")
    args = parser.parse_args(argv)
    eagle = load_pool_file(args.pool / "pool.json").eagle3
    drafters = [d.id for d in eagle]
    domains = [d.domain for d in eagle if d.domain is not None and d.domain != "all"]
    spec = ReportSpec(prompts_per_domain=args.prompts)
    tables = measure_reports(args.pool / "pool.json", drafters, domains, spec, args.workers)
    report = full_report(tables, drafters, domains, spec)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    for table in (report, *report["sampling"].values()):
        print(f"temperature {table['measurement']['temperature']}")
        for name, row, avg in zip(drafters, table["mat"], table["average"], strict=True):
            print(f"{name:>11} " + " ".join(f"{v:5.2f}" for v in row) + f" | {avg:5.2f}")
        print(json.dumps(table["checks"], indent=1))


if __name__ == "__main__":
    main()
