"""`hedgespec demo build`: the demo pool's drafters for SmolLM2-135M-Instruct, from a seed.

Stages: target (provision the converted SmolLM2 directory, `core/provision/smollm2.py`) ->
rollouts (the target's greedy and sampled answers to each domain's training prompts; reused from
`demo/data/rollouts/` when their key matches) -> target features (once, shared by all eight
drafters) -> generalist -> seven specialists -> pool files -> router (the static router
baseline, `demo/router.py`) -> report (MAT tables measured with the real engine, greedy and at
temperature 1).

    hedgespec demo build --out demo/pool [--quick] [--seed 0] [--cache DIR] [--set KEY=VALUE]
    python -m demo.pipeline ...  (the same options)

Reads only `demo/data/` and the SmolLM2 wheel; writes `drafters/<id>/`, `pool.json`,
`router.npz`, `eval_prompts.jsonl`, `report.json` and `REPORT.md` under the output directory.
Every trained drafter and every rollout chunk is kept in the stage cache (default
`~/.cache/hedgespec/build`), so an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

from core.model.eagle3 import Eagle3Drafter
from core.provision import smollm2
from demo.build_cli import add_build_arguments
from demo.build_config import FULL, QUICK, BuildConfig, with_overrides
from demo.build_info import build_summary
from demo.build_timer import StageTimer
from demo.domains import DATA_DIR, DOMAINS, POOL_DIR, ROLLOUTS_FILE, corpus_path
from demo.features import TargetFeatures
from demo.general_chat import GENERAL, general_records
from demo.pool_files import GENERALIST, pool_bytes, write_pool_files
from demo.precision import target_dtype
from demo.prompt_picks import pick
from demo.records import load_records
from demo.report import full_report, measure_reports, write_report
from demo.report_md import render_report_md
from demo.rollouts import (
    PromptJob,
    Rollout,
    extend_rollouts,
    load_rollouts,
    save_rollouts,
    stored_responses,
)
from demo.router import add_to_pool, train_router
from demo.stage_cache import StageCache, rollout_key
from demo.train_drafters import clone_drafter, new_drafter, response_token_counts, train_drafter


def eagle3_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's feature layers (inputs of decoder layers 2, L//2, L-3): 30 layers ->
    (2, 15, 27)."""
    layers = (2, num_layers // 2, num_layers - 3)
    if not 0 < layers[0] < layers[1] < layers[2] < num_layers:
        raise ValueError("a target needs at least 8 layers for EAGLE-3's features, got "
                         f"{num_layers}")
    return layers


def prompt_jobs(cfg: BuildConfig, seed: int, data_dir: Path) -> list[PromptJob]:
    """The general chat first (greedy jobs for the first general_greedy prompts, then
    temperature-1 jobs for every general_sampled_every-th of them), then per domain: greedy
    jobs for the first greedy_per_domain picked prompts (domain_greedy's count for the domains
    it names) and temperature-1 jobs for the first sampled_per_domain of them. (The order of
    the rollout chunks, so stored and freshly made rollouts come back in the same order.)"""
    spec = cfg.rollouts
    general = general_records()[: spec.general_greedy]
    jobs = [PromptJob(r, rank, 0.0) for rank, r in enumerate(general)]
    if spec.general_sampled_every > 0:
        jobs += [PromptJob(r, rank, 1.0) for rank, r in enumerate(general)
                 if rank % spec.general_sampled_every == 0]
    for domain in DOMAINS:
        picked = pick(load_records(corpus_path(domain, data_dir), domain),
                      spec.domain_greedy.get(domain, spec.greedy_per_domain), seed + 1)
        jobs += [PromptJob(r, rank, 0.0) for rank, r in enumerate(picked)]
        jobs += [PromptJob(r, rank, 1.0)
                 for rank, r in enumerate(picked[: spec.sampled_per_domain])]
    return jobs


# Sampling seed of each rollout chunk (offset from the build seed), in the order of prompt_jobs.
CHUNK_SEEDS = {GENERAL: 5, **{d: 10 + i for i, d in enumerate(DOMAINS)}}


def load_target(cfg: BuildConfig) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    path = smollm2.provision()
    dtype = target_dtype(cfg.target_dtype, cfg.device)
    model = LlamaForCausalLM.from_pretrained(str(path), dtype=dtype)
    torch.nn.Module.to(model, cfg.device)  # (transformers' typed `.to` confuses mypy)
    model.eval().requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(str(path))


def build_rollouts(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, cfg: BuildConfig, seed: int,
    data_dir: Path, rollouts_file: Path | None, cache: StageCache,
) -> list[Rollout]:
    spec = cfg.rollouts
    jobs = prompt_jobs(cfg, seed, data_dir)
    key = rollout_key(cfg, seed, data_dir)
    for path in (rollouts_file, cache.path("rollouts.jsonl")):
        if path is not None:
            found = load_rollouts(path, key, jobs, tokenizer, spec.prompt_chars)
            if found is not None:
                cache.hits.append(f"rollouts ({path.name})")
                return found
    stored = {**stored_responses(cache.path("rollouts.jsonl"), key),
              **stored_responses(rollouts_file, key)}
    rollouts: list[Rollout] = []
    for domain, offset in CHUNK_SEEDS.items():  # one chunk per domain: an interrupted build
        part = [j for j in jobs if j.record.domain == domain]  # keeps its finished chunks
        if not part:
            continue  # e.g. no general chat asked for
        chunk = cache.path(f"rollouts-{domain}.jsonl")
        done = extend_rollouts(model, tokenizer, part, {**stored, **stored_responses(chunk, key)},
                               prompt_chars=spec.prompt_chars, max_new_tokens=spec.max_new_tokens,
                               batch_size=spec.batch_size, seed=seed + offset)
        if chunk is not None:
            save_rollouts(chunk, done, key)
        rollouts += done
    for path in (rollouts_file, cache.path("rollouts.jsonl")):
        if path is not None:
            save_rollouts(path, rollouts, key)
    return rollouts


def train_pool(
    model: LlamaForCausalLM, rollouts: list[Rollout], cfg: BuildConfig, seed: int,
    timer: StageTimer, cache: StageCache,
) -> dict[str, Eagle3Drafter]:
    """The generalist on the general chat plus an equal small share of every domain, then each
    specialist on all of its own domain's rollouts (most of which the generalist never saw):
    from scratch with its domain's draft vocabulary, or fine-tuned from the generalist
    (`specialist_init`)."""
    aux = eagle3_aux_layers(model.config.num_hidden_layers)
    with timer.stage("features"):
        features = TargetFeatures(model, aux)
        features.compute(rollouts)
    mixture = generalist_mixture(rollouts, cfg)
    counts = response_token_counts(mixture, model.config.vocab_size)
    with timer.stage("generalist"):
        generalist = cache.load_drafter(GENERALIST, model)
        if generalist is None:
            generalist = new_drafter(model, counts, cfg.drafter, aux, seed + 20)
            cache.logs[GENERALIST] = train_drafter(generalist, features, mixture, cfg.drafter,
                                                   cfg.generalist, seed=seed + 21, desc=GENERALIST)
            cache.save_drafter(GENERALIST, generalist)
    pool = {GENERALIST: generalist}
    with timer.stage("specialists"):
        for i, domain in enumerate(DOMAINS):
            specialist = cache.load_drafter(domain, model)
            if specialist is None:
                own = [r for r in rollouts if r.domain == domain]
                specialist = initial_specialist(model, generalist, own, cfg, aux, seed + 40 + i)
                cache.logs[domain] = train_drafter(specialist, features, own, cfg.drafter,
                                                   cfg.specialist_schedule(domain),
                                                   seed=specialist_seed(seed, domain), desc=domain)
                cache.save_drafter(domain, specialist)
            pool[domain] = specialist
    return pool


def specialist_seed(seed: int, domain: str) -> int:
    """The training seed of `domain`'s specialist (also used by `demo.retrain`)."""
    return seed + 30 + DOMAINS.index(domain)


def generalist_mixture(rollouts: list[Rollout], cfg: BuildConfig) -> list[Rollout]:
    """All the general chat plus the first generalist_per_domain prompts of every domain."""
    share = cfg.rollouts.generalist_per_domain
    return [r for r in rollouts if r.domain == GENERAL or r.rank < share]


def initial_specialist(
    model: LlamaForCausalLM, generalist: Eagle3Drafter, own: list[Rollout], cfg: BuildConfig,
    aux: tuple[int, int, int], seed: int,
) -> Eagle3Drafter:
    if cfg.specialist_init == "generalist":
        return clone_drafter(generalist, model)
    counts = response_token_counts(own, model.config.vocab_size)
    return new_drafter(model, counts, cfg.drafter, aux, seed)


def build(
    out_dir: Path = POOL_DIR, *, quick: bool = False, seed: int = 0, data_dir: Path = DATA_DIR,
    config: BuildConfig | None = None, cache_dir: Path | None = None,
    rollouts_file: Path | None = None,
) -> Path:
    """Build the demo pool into `out_dir` and return the path of its `pool.json`."""
    cfg = config or (QUICK if quick else FULL)
    if rollouts_file is None and not quick and data_dir == DATA_DIR:
        rollouts_file = ROLLOUTS_FILE  # the committed rollouts of the full build
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _build(Path(out_dir), cfg, quick, seed, data_dir, cache_dir, rollouts_file)
    finally:
        torch.set_num_threads(threads)


def _build(
    out_dir: Path, cfg: BuildConfig, quick: bool, seed: int, data_dir: Path,
    cache_dir: Path | None, rollouts_file: Path | None,
) -> Path:
    timer = StageTimer()
    cache = StageCache(cache_dir, cfg, seed, data_dir)
    with timer.stage("target"):
        model, tokenizer = load_target(cfg)
    with timer.stage("rollouts"):
        rollouts = build_rollouts(model, tokenizer, cfg, seed, data_dir, rollouts_file, cache)
    pool = train_pool(model, rollouts, cfg, seed, timer, cache)
    with timer.stage("save"):
        write_pool_files(out_dir, pool, cfg, data_dir)
    pool_json = out_dir / "pool.json"
    with timer.stage("router"):
        add_router(pool_json, tokenizer, cfg, seed, data_dir)
    with timer.stage("report"):
        tables = measure_reports(pool_json, list(pool), DOMAINS, cfg.report, cfg.report_workers)
    report = full_report(tables, list(pool), DOMAINS, cfg.report)
    report["build"] = build_summary(
        cfg, quick=quick, seed=seed, timer_seconds=timer.seconds, cached=cache.hits,
        pool_bytes=pool_bytes(out_dir), model=model, rollouts=rollouts,
        eos_id=int(tokenizer.eos_token_id), generalist=pool[GENERALIST], logs=cache.logs,
        aux_layers=eagle3_aux_layers(model.config.num_hidden_layers),
    )
    write_report(report, out_dir)
    (out_dir / "REPORT.md").write_text(render_report_md(report))
    print(f"pool written to {out_dir} ({report['build']['pool_bytes'] / 1e6:.1f} MB)", flush=True)
    return pool_json


def add_router(pool_json: Path, tokenizer: PreTrainedTokenizerBase, cfg: BuildConfig, seed: int,
               data_dir: Path) -> None:
    """Train the static router baseline into the pool, as `python -m demo.router` does."""
    add_to_pool(train_router(tokenizer, cfg.router_per_domain, seed, data_dir), pool_json)


def run_build(args: argparse.Namespace) -> Path:
    """Build the pool the parsed options (demo/build_cli.py) describe; returns the path of its
    pool.json."""
    cfg = with_overrides(QUICK if args.quick else FULL, args.set)
    return build(args.out, quick=args.quick, seed=args.seed, config=cfg, cache_dir=args.cache,
                 rollouts_file=args.rollouts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the HedgeSpec demo pool (CPU, "
                                                 "deterministic).")
    add_build_arguments(parser)
    run_build(parser.parse_args(argv))


if __name__ == "__main__":
    main()
