"""The whole build pipeline at tiny sizes (`--quick`) on the real SmolLM2 target: every stage
runs, writes the pool layout, and an interrupted build resumes from its stage cache."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from core.model.drafter_check import inspect_drafter
from core.selection.router import PromptRouter
from demo import pipeline
from demo.build_config import QUICK, with_overrides
from demo.build_timer import StageTimer
from demo.domains import DATA_DIR, DOMAINS
from demo.rollouts import Stored, extend_rollouts, generate_rollouts, load_rollouts
from demo.stage_cache import StageCache, rollout_key

# Smaller still than --quick for the tests that run the stages themselves: one prompt a domain
# (a sampled answer of it too) and two of general chat.
TINY = with_overrides(QUICK, ["rollouts.greedy_per_domain=1", "rollouts.generalist_per_domain=1",
                              "rollouts.general_greedy=2", "rollouts.general_sampled_every=2"])


def test_quick_build_writes_the_pool_layout(quick_pool: Path, smollm2_dir: Path) -> None:
    root = quick_pool.parent
    pool = json.loads(quick_pool.read_text())
    assert pool["target"] == {"provision": "smollm2-135m-instruct"}
    assert pool["generation_config"] == {"temperature": 0.2, "top_p": 0.9}  # the model card's
    assert not (root / "target").exists()  # the target lives in the target cache
    assert [d["id"] for d in pool["drafters"]] == ["generalist", *DOMAINS, "lookup", "suffix"]
    for name in ("report.json", "REPORT.md", "eval_prompts.jsonl"):
        assert (root / name).is_file()
    for entry in pool["drafters"][: 1 + len(DOMAINS)]:
        result = inspect_drafter(root / entry["path"], smollm2_dir)
        assert result.compatible, result
    # the static router baseline comes with the build, as the shipped pool has it
    assert pool["router"] == "router.npz"
    assert set(PromptRouter.load(root / pool["router"]).labels) == set(DOMAINS)


def test_quick_build_report_has_greedy_and_sampled_tables(quick_pool: Path) -> None:
    report = json.loads((quick_pool.parent / "report.json").read_text())
    tables = [report, *report["sampling"].values()]
    assert [t["measurement"]["temperature"] for t in tables] == [0.0, 1.0]
    for table in tables:
        assert table["domains"] == list(DOMAINS) and table["drafters"] == ["generalist", *DOMAINS]
        assert len(table["mat"]) == 8 and all(len(row) == 7 for row in table["mat"])
        depth = table["measurement"]["tree"]["depth"]
        assert all(1.0 <= v <= 1 + depth for row in table["mat"] for v in row)
        # the oracle can pick the generalist
        assert table["checks"]["oracle_over_generalist"] >= 1.0
    stages = set(report["build"]["stage_seconds"])
    assert stages >= {"target", "rollouts", "features", "generalist", "specialists", "router",
                      "report"}
    text = (quick_pool.parent / "REPORT.md").read_text()
    assert "| generalist |" in text and "temperature 1.0" in text


def test_an_interrupted_build_resumes_from_its_cache(tmp_path: Path) -> None:
    """Rollout chunks and trained drafters come back from the cache, identical."""
    model, tokenizer = pipeline.load_target(TINY)
    runs = []
    for _ in range(2):
        cache = StageCache(tmp_path, TINY, 0, DATA_DIR)
        rollouts = pipeline.build_rollouts(model, tokenizer, TINY, 0, DATA_DIR, None, cache)
        pool = pipeline.train_pool(model, rollouts, TINY, 0, StageTimer(), cache)
        runs.append((rollouts, pool, cache.hits))
    (first, pool_a, hits_a), (second, pool_b, hits_b) = runs
    assert hits_a == [] and "rollouts (rollouts.jsonl)" in hits_b
    assert sum(h.startswith("drafter ") for h in hits_b) == 8
    assert first == second
    for drafter_id, drafter in pool_a.items():
        for key, value in drafter.state_dict().items():
            assert torch.equal(value, pool_b[drafter_id].state_dict()[key]), (drafter_id, key)


def test_stale_rollouts_are_not_reused(tmp_path: Path) -> None:
    model, tokenizer = pipeline.load_target(TINY)
    cache = StageCache(tmp_path, TINY, 0, DATA_DIR)
    pipeline.build_rollouts(model, tokenizer, TINY, 0, DATA_DIR, None, cache)
    path = cache.path("rollouts.jsonl")
    assert path is not None
    jobs = pipeline.prompt_jobs(TINY, 0, DATA_DIR)
    key = rollout_key(TINY, 0, DATA_DIR)
    chars = TINY.rollouts.prompt_chars
    assert load_rollouts(path, key, jobs, tokenizer, chars) is not None
    assert load_rollouts(path, {**key, "seed": 1}, jobs, tokenizer, chars) is None
    assert load_rollouts(path, key, jobs[:-1], tokenizer, chars) is not None  # fewer: served
    bigger = with_overrides(TINY, ["rollouts.greedy_per_domain=2"])
    assert rollout_key(bigger, 0, DATA_DIR) == key  # counts are not the key
    assert load_rollouts(path, key, pipeline.prompt_jobs(bigger, 0, DATA_DIR), tokenizer,
                         chars) is None  # more: some are missing


def test_a_larger_build_generates_only_the_missing_rollouts() -> None:
    """Stored responses (a sentinel no model would produce) come back as stored, with the
    dtype they were stored with; the one missing job is generated, exactly as generating it
    alone would, and labelled with the model's dtype."""
    model, tokenizer = pipeline.load_target(QUICK)
    jobs = pipeline.prompt_jobs(QUICK, 0, DATA_DIR)[:3]
    spec = QUICK.rollouts
    settings = {"prompt_chars": spec.prompt_chars, "max_new_tokens": spec.max_new_tokens,
                "batch_size": spec.batch_size, "seed": 7}
    sentinel = (999, 998, 997)
    stored = {(j.record.id, j.temperature): Stored(sentinel, "torch.float64") for j in jobs[:-1]}
    out = extend_rollouts(model, tokenizer, jobs, stored, **settings)
    assert [(r.response_ids, r.dtype) for r in out[:-1]] == [(sentinel, "torch.float64")] * 2
    alone = generate_rollouts(model, tokenizer, jobs[-1:], **settings)
    assert out[-1] == alone[0] and out[-1].response_ids != sentinel
    assert out[-1].dtype == str(model.dtype)


def test_the_committed_rollouts_serve_every_job_of_the_full_build() -> None:
    """So a rebuild of the shipped pool skips generation and trains on the same rollouts."""
    from demo.build_config import FULL
    from demo.domains import ROLLOUTS_FILE
    from demo.rollouts import stored_responses

    key = rollout_key(FULL, 0, DATA_DIR)
    stored = stored_responses(ROLLOUTS_FILE, key)
    jobs = pipeline.prompt_jobs(FULL, 0, DATA_DIR)
    # general chat 320 + 80; 640 + 160 a domain, but news has only 422 training prompts and
    # medical answers all 2,000 of its own greedily
    assert len(jobs) == 400 + (len(DOMAINS) - 2) * 800 + 422 + 160 + 2000 + 160 == len(stored)
    assert all((j.record.id, j.temperature) in stored for j in jobs)
