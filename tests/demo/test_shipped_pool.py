"""The committed demo pool (`demo/pool/`) loads, is consistent and its report reproduces."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.eagle3 import inspect_drafter, load_drafter
from demo.domains import DOMAINS, POOL_DIR
from demo.records import read_jsonl, user_turn
from demo.report import Cell, ReportSpec, measure_table

POOL_JSON = POOL_DIR / "pool.json"
MAX_POOL_BYTES = 40 * 1024 * 1024


@pytest.fixture(scope="module")
def pool() -> dict:
    return json.loads(POOL_JSON.read_text())


@pytest.fixture(scope="module")
def report() -> dict:
    return json.loads((POOL_DIR / "report.json").read_text())


def test_pool_json_lists_the_generalist_and_seven_specialists(pool: dict) -> None:
    assert pool["target"] == "target"
    ids = [d["id"] for d in pool["drafters"]]
    assert ids == ["generalist", *DOMAINS]
    for entry in pool["drafters"]:
        assert entry["domain"] == ("all" if entry["id"] == "generalist" else entry["id"])
        assert (POOL_DIR / entry["path"] / "config.json").is_file()
        assert (POOL_DIR / entry["path"] / "model.safetensors").is_file()


def test_pool_fits_the_size_budget() -> None:
    size = sum(p.stat().st_size for p in POOL_DIR.rglob("*") if p.is_file())
    assert size <= MAX_POOL_BYTES


def test_target_and_chat_template_load() -> None:
    tok = AutoTokenizer.from_pretrained(str(POOL_DIR / "target"))
    model = AutoModelForCausalLM.from_pretrained(str(POOL_DIR / "target"))
    assert model.config.model_type == "llama"
    assert model.config.num_hidden_layers >= 6
    text = tok.apply_chat_template(
        [{"role": "user", "content": "SELECT?"}], add_generation_prompt=True, tokenize=False
    )
    assert text == user_turn("SELECT?")
    assert tok.eos_token == "<|end|>"


def test_every_drafter_loads_and_is_compatible(pool: dict) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(POOL_DIR / "target"))
    aux = set()
    for entry in pool["drafters"]:
        path = POOL_DIR / entry["path"]
        result = inspect_drafter(path, POOL_DIR / "target")
        assert result["compatible"], result
        drafter = load_drafter(path, embed_tokens=model.get_input_embeddings())
        assert drafter.cfg.draft_vocab_size < drafter.cfg.vocab_size
        assert drafter.cfg.aux_layers is not None and len(set(drafter.cfg.aux_layers)) == 3
        aux.add(drafter.cfg.aux_layers)
    assert len(aux) == 1  # one target, one set of capture layers


def test_every_drafter_passes_the_inspect_command(
    pool: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main as hedgespec

    for entry in pool["drafters"]:
        code = hedgespec(["drafter", "inspect", str(POOL_DIR / entry["path"]),
                          "--target", str(POOL_DIR / "target")])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["compatible"], (entry["id"], out)


def test_eval_prompts_cover_every_domain() -> None:
    rows = list(read_jsonl(POOL_DIR / "eval_prompts.jsonl"))
    assert {r["domain"] for r in rows} == set(DOMAINS)
    assert all(set(r) == {"id", "domain", "prompt"} for r in rows)
    assert all(sum(r["domain"] == d for r in rows) >= 12 for d in DOMAINS)


def test_report_shows_the_specialisation_pattern(report: dict) -> None:
    drafters, domains, mat = report["drafters"], report["domains"], report["mat"]
    assert domains == list(DOMAINS) and drafters == ["generalist", *DOMAINS]
    g = drafters.index("generalist")
    for d in domains:
        assert mat[drafters.index(d)][domains.index(d)] > mat[g][domains.index(d)], d
    averages = [sum(row) / len(row) for row in mat]
    specialists = [a for name, a in zip(drafters, averages, strict=True) if name != "generalist"]
    assert averages[g] > sum(specialists) / len(specialists)


def test_a_slice_of_the_report_reproduces(report: dict) -> None:
    m = report["measurement"]
    n = 2
    spec = ReportSpec(
        top_k=m["tree"]["top_k"], depth=m["tree"]["depth"], total_tokens=m["tree"]["total_tokens"],
        max_new_tokens=m["max_new_tokens"], prompts_per_domain=n,
    )
    drafters, domains = ["generalist", "sql"], ["sql", "math"]
    cells = measure_table(POOL_JSON, drafters, domains, spec, workers=1)
    for (dr, do), cell in cells.items():
        shipped = report["per_prompt"][dr][do]
        expected = Cell(tuple(shipped["tokens"][:n]), tuple(shipped["rounds"][:n]))
        # Greedy decoding is deterministic; a small tolerance absorbs float summation order.
        assert cell.mat == pytest.approx(expected.mat, rel=0.1), (dr, do)
