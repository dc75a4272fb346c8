"""The whole build pipeline at tiny sizes (`--quick`): every stage runs and writes the pool layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.eagle3 import inspect_drafter, load_drafter
from demo.domains import DOMAINS
from demo.records import read_jsonl


@pytest.fixture(scope="module")
def quick_pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built through the documented command, `hedgespec demo build` (same options as
    `python -m demo.pipeline`), with a stage cache and an override."""
    from gateway.cli import main as hedgespec

    out, cache = tmp_path_factory.mktemp("pool"), tmp_path_factory.mktemp("cache")
    args = ["demo", "build", "--quick", "--out", str(out), "--seed", "0", "--cache", str(cache),
            "--set", "eval_prompts_per_domain=3"]  # fmt: skip
    assert hedgespec(args) == 0
    assert len(list(read_jsonl(out / "eval_prompts.jsonl"))) == 3 * len(DOMAINS)
    return out / "pool.json"


def test_quick_build_writes_the_pool_layout(quick_pool: Path) -> None:
    root = quick_pool.parent
    pool = json.loads(quick_pool.read_text())
    assert pool["target"] == "target"
    assert [d["id"] for d in pool["drafters"]] == ["generalist", *DOMAINS]
    for name in ("report.json", "REPORT.md", "eval_prompts.jsonl"):
        assert (root / name).is_file()
    tok = AutoTokenizer.from_pretrained(str(root / "target"))
    model = AutoModelForCausalLM.from_pretrained(str(root / "target"))
    for entry in pool["drafters"]:
        path = root / entry["path"]
        assert inspect_drafter(path, root / "target")["compatible"]
        drafter = load_drafter(path, embed_tokens=model.get_input_embeddings())
        assert drafter.cfg.vocab_size == len(tok)


def test_quick_build_report_has_the_table(quick_pool: Path) -> None:
    report = json.loads((quick_pool.parent / "report.json").read_text())
    assert report["domains"] == list(DOMAINS)
    assert report["drafters"] == ["generalist", *DOMAINS]
    assert len(report["mat"]) == 8 and all(len(row) == 7 for row in report["mat"])
    assert all(1.0 <= v <= 1 + report["measurement"]["tree"]["depth"] for row in report["mat"] for v in row)
    assert set(report["build"]["stage_seconds"]) >= {"tokenizer", "target", "rollouts", "generalist", "report"}
    assert "| generalist |" in (quick_pool.parent / "REPORT.md").read_text()
