"""bench/speed/peer.py: the plan every mode runs, the targets read off the table, and one real
run of this server's plain mode through the benchmark (vLLM is optional and absent in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bench.speed import peer
from bench.speed.peer import Cell
from core.provision import provision


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(str(provision("smollm2-135m-instruct", progress=False)))


def test_every_pass_gets_prompts_no_other_pass_saw(tokenizer) -> None:  # type: ignore[no-untyped-def]
    plan = peer.make_plan(tokenizer, [1, 2, 4], [1], passes=3, max_tokens=8)
    cases = {(w, n, s): passes for w, n, s, passes in plan.cases}
    assert set(cases) == {("held_out", 1, False), ("held_out", 2, False), ("held_out", 4, False),
                          ("held_out", 1, True), ("copy_heavy", 1, False)}
    assert [len(p) for p in cases[("held_out", 4, False)]] == [4, 4, 4]
    assert [len(p) for p in cases[("held_out", 1, False)]] == [4, 4, 4]  # 4 in a row a pass
    assert [len(p) for p in cases[("copy_heavy", 1, False)]] == [5, 5, 5]
    held = [p for w, _, _, passes in plan.cases if w == "held_out" for ps in passes for p in ps]
    assert len(set(held + list(plan.warmup))) == len(held) + 2  # nothing sent twice


def _cell(mode: str, rate: float, streams: int = 1, workload: str = "held_out") -> Cell:
    return Cell(mode, workload, streams, False, (rate * 0.9, rate, rate * 1.1))


def test_the_targets_compare_medians_and_mark_misses() -> None:
    cells = [_cell("hedgespec_plain", 30.0), _cell("vllm_plain", 40.0),
             _cell("hedgespec", 70.0), _cell("vllm_ngram", 50.0),
             _cell("hedgespec", 90.0, workload="copy_heavy"),
             _cell("vllm_plain", 40.0, workload="copy_heavy")]
    lines = peer.targets(cells)
    assert "- plain, held-out 1 stream(s), x vLLM plain: 0.75x (target 1x) MISSED" in lines
    assert any("held_out 1 stream(s) greedy, x vLLM n-gram: 1.40x (target 1x) met" in x
               for x in lines)
    assert "- default, held-out 1 stream, x vLLM plain: 1.75x (target 1.5x) met" in lines
    assert "- default, copy-heavy 1 stream, x vLLM plain: 2.25x (target 2x) met" in lines
    assert _cell("x", 10.0).spread == pytest.approx(1.1 / 0.9 - 1)


def test_a_quick_run_measures_this_servers_plain_mode(tmp_path: Path) -> None:
    assert peer.main(["--modes", "hedgespec_plain", "--levels", "1", "--sampled-levels", "",
                      "--passes", "1", "--max-tokens", "8",
                      "--vllm-python", str(tmp_path / "no-vllm"), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "peer.json").read_text())
    rows = {(c["workload"], c["streams"]): c for c in report["cells"]}
    assert set(rows) == {("held_out", 1), ("copy_heavy", 1)}
    assert all(r["mode"] == "hedgespec_plain" and min(r["passes"]) > 0 for r in rows.values())
    assert "| held_out | 1 | greedy |" in (tmp_path / "peer.md").read_text()
    assert (tmp_path / "peer.png").stat().st_size > 0
