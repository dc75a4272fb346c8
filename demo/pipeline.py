"""`hedgespec demo build`: the whole demo pool, deterministically from a seed.

Stages: tokenizer -> target -> held-out loss -> target rollouts -> generalist drafter ->
seven specialists -> pool files -> report (MAT table measured with the real engine).

    hedgespec demo build --out demo/pool [--quick] [--seed 0] [--cache DIR] [--set KEY=VALUE]
    python -m demo.pipeline ...  (the same options)

Reads only `demo/data/`; writes `target/`, `drafters/<id>/`, `pool.json`,
`eval_prompts.jsonl`, `report.json` and `REPORT.md` under the output directory. With `--cache`
the trained target and its rollouts are kept and reused when their inputs are unchanged (a
development aid for iterating on the drafters; the result is the same as without it).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from core.eagle3 import Eagle3Drafter
from demo.build_cli import add_build_arguments, run_build
from demo.build_config import FULL, QUICK, BuildConfig, aux_layers_for
from demo.build_info import build_summary
from demo.domains import DATA_DIR, DOMAINS, POOL_DIR, corpus_path, eval_path
from demo.pool_files import GENERALIST, pool_bytes, write_pool_files
from demo.records import Record, chat_text, load_records
from demo.report import measure_table, report_dict, specialisation_checks, write_report
from demo.report_md import render_report_md
from demo.rollouts import Rollout, generate_rollouts
from demo.stage_cache import StageCache
from demo.tokenizer import train_tokenizer
from demo.train_drafters import (
    TargetFeatures,
    TrainLog,
    clone_drafter,
    new_drafter,
    response_token_counts,
    train_drafter,
)
from demo.train_target import mean_loss, train_target


class StageTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        print(f"== {name}: {self.seconds[name]:.1f} s", flush=True)


def load_corpora(data_dir: Path, limit: int | None = None) -> dict[str, list[Record]]:
    return {d: load_records(corpus_path(d, data_dir), d)[:limit] for d in DOMAINS}


def pick(records: list[Record], n: int, seed: int) -> list[Record]:
    """n records chosen by a seeded permutation (spreads over topics; ids are sorted by source)."""
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed)).tolist()
    return [records[i] for i in order[:n]]


def round_to_fp16(model: torch.nn.Module) -> None:
    """Round weights to the shipped fp16 values, so rollouts, drafter training and the report
    all see exactly the target that is served."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())


def heldout_losses(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, cfg: BuildConfig, data_dir: Path
) -> dict[str, float]:
    out = {}
    for d in DOMAINS:
        recs = load_records(eval_path(d, data_dir), d)[: cfg.heldout_records]
        docs = [tokenizer(chat_text(r.prompt, r.response))["input_ids"] for r in recs]
        out[d] = round(mean_loss(model, docs, cfg.target.seq_len), 4)
    return out


def build_rollouts(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    corpora: dict[str, list[Record]],
    cfg: BuildConfig,
    seed: int,
) -> list[Rollout]:
    spec = cfg.rollouts
    picked = {d: pick(corpora[d], spec.prompts_per_domain, seed + 1) for d in DOMAINS}
    records = [r for d in DOMAINS for r in picked[d]]
    ranks = [i for d in DOMAINS for i in range(len(picked[d]))]
    rollouts: list[Rollout] = []
    for i, temperature in enumerate(spec.temperatures):
        rollouts += generate_rollouts(
            model, tokenizer, records, ranks=ranks, prompt_chars=spec.prompt_chars,
            max_new_tokens=spec.max_new_tokens, temperature=temperature,
            batch_size=spec.batch_size, seed=seed + 10 + i,
        )
    return [r for r in rollouts if r.response_ids]


def train_pool(
    model: LlamaForCausalLM, rollouts: list[Rollout], cfg: BuildConfig, pad_id: int, seed: int,
    timer: StageTimer,
) -> tuple[dict[str, Eagle3Drafter], dict[str, TrainLog]]:
    """The generalist on a mixture of every domain, then each specialist fine-tuned from it on
    all of its own domain's rollouts, most of which the generalist never saw (as HedgeSpec's
    experts were fine-tuned on domain data beyond the generalist's)."""
    aux = aux_layers_for(model.config.num_hidden_layers)
    mixture = [r for r in rollouts if r.rank < cfg.rollouts.generalist_per_domain]
    counts = response_token_counts(mixture, model.config.vocab_size)
    generalist = new_drafter(model, counts, cfg.drafter, aux, seed + 20)
    features = TargetFeatures(model, aux, pad_id)  # computed once, shared by all eight drafters
    logs: dict[str, TrainLog] = {}
    with timer.stage("generalist"):
        logs[GENERALIST] = train_drafter(
            generalist, model, mixture, cfg.drafter, cfg.generalist,
            pad_id=pad_id, seed=seed + 21, desc=GENERALIST, features=features,
        )
    pool = {GENERALIST: generalist}
    with timer.stage("specialists"):
        for i, domain in enumerate(DOMAINS):
            specialist = clone_drafter(generalist, model)
            own = [r for r in rollouts if r.domain == domain]
            logs[domain] = train_drafter(
                specialist, model, own, cfg.drafter, cfg.specialist,
                pad_id=pad_id, seed=seed + 30 + i, desc=domain, features=features,
            )
            pool[domain] = specialist
    return pool, logs


def build(
    out_dir: Path = POOL_DIR,
    *,
    quick: bool = False,
    seed: int = 0,
    data_dir: Path = DATA_DIR,
    config: BuildConfig | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """Build the demo pool into `out_dir` and return the path of its `pool.json`."""
    cfg = config or (QUICK if quick else FULL)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _build(Path(out_dir), cfg, quick, seed, data_dir, cache_dir)
    finally:
        torch.set_num_threads(threads)


def _build(
    out_dir: Path, cfg: BuildConfig, quick: bool, seed: int, data_dir: Path, cache_dir: Path | None
) -> Path:
    timer = StageTimer()
    cache = StageCache(cache_dir, cfg, seed, data_dir)
    corpora = load_corpora(data_dir, cfg.corpus_records)
    texts = [chat_text(r.prompt, r.response) for d in DOMAINS for r in corpora[d]]
    with timer.stage("tokenizer"):
        tokenizer = cache.load_tokenizer() or train_tokenizer(texts, cfg.vocab_size)
    with timer.stage("target"):
        model, target_losses = _target(cache, tokenizer, texts, cfg, seed)
    with timer.stage("heldout_loss"):
        heldout = heldout_losses(model, tokenizer, cfg, data_dir)
    with timer.stage("rollouts"):
        rollouts = cache.load_rollouts()
        if rollouts is None:
            rollouts = build_rollouts(model, tokenizer, corpora, cfg, seed)
            cache.save_rollouts(rollouts)
    pool, logs = train_pool(model, rollouts, cfg, tokenizer.pad_token_id, seed, timer)
    with timer.stage("save"):
        write_pool_files(out_dir, tokenizer, model, pool, cfg, data_dir)
    pool_json = out_dir / "pool.json"
    with timer.stage("report"):
        cells = measure_table(pool_json, list(pool), DOMAINS, cfg.report, cfg.report_workers)
    report = report_dict(cells, list(pool), DOMAINS, cfg.report)
    report["checks"] = specialisation_checks(report)
    report["build"] = build_summary(
        cfg, quick=quick, seed=seed, timer_seconds=timer.seconds, cached=cache.hits,
        pool_bytes=pool_bytes(out_dir), model=model, target_losses=target_losses,
        heldout=heldout, rollouts=rollouts, eos_id=tokenizer.eos_token_id,
        generalist=pool[GENERALIST], logs=logs,
    )
    write_report(report, out_dir)
    (out_dir / "REPORT.md").write_text(render_report_md(report))
    print(f"pool written to {out_dir} ({report['build']['pool_bytes'] / 1e6:.1f} MB)", flush=True)
    return pool_json


def _target(
    cache: StageCache, tokenizer: PreTrainedTokenizerFast, texts: list[str], cfg: BuildConfig, seed: int
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train (or reuse) the target; weights are rounded to the fp16 values that ship."""
    cached = cache.load_target(cfg.device)
    if cached is not None:
        model, losses = cached
    else:
        docs = [tokenizer(t)["input_ids"] for t in texts]
        model, losses = train_target(docs, tokenizer, cfg.target, seed, cfg.device)
        round_to_fp16(model)
        cache.save_target(model, tokenizer, losses)
    model.requires_grad_(False)
    return model, losses


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the HedgeSpec demo pool (CPU, deterministic).")
    add_build_arguments(parser)
    run_build(parser.parse_args(argv))


if __name__ == "__main__":
    main()
