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
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Built through the documented command, `hedgespec demo build` (same options as
    `python -m demo.pipeline`), with a stage cache and an override: (pool.json, cache dir)."""
    from demo.domains import DOMAINS
    from demo.records import read_jsonl
    from gateway.cli import main as hedgespec

    out, cache = tmp_path_factory.mktemp("pool"), tmp_path_factory.mktemp("cache")
    # two torch threads: the suite's one-thread setting is for its tiny models; on SmolLM2 the
    # quick build took 43 s with two against 54 s with one (2026-12-05), and nothing here
    # compares its numbers with a committed file
    args = ["demo", "build", "--quick", "--out", str(out), "--seed", "0", "--cache", str(cache),
            "--set", "eval_prompts_per_domain=3", "--set", "threads=2"]  # fmt: skip
    assert hedgespec(args) == 0
    assert len(list(read_jsonl(out / "eval_prompts.jsonl"))) == 3 * len(DOMAINS)
    return out / "pool.json", cache
