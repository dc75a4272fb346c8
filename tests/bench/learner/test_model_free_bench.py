"""The model-free benchmark runs end to end (--quick, tiny local pool) and reports every row;
the vendored copy-heavy workload is well formed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.harness.tiny_pool import DRAFTER_IDS
from bench.learner.model_free_bench import COPY_HEAVY, main
from bench.learner.model_free_methods import EAGLE_ONLY, HYBRID, WHOLE_POOL, WORKLOADS
from tests.bench.learner.test_hedgespec_bench import pool_with_prompts

ROWS = ("plain", *(f"fixed:{d}" for d in DRAFTER_IDS), "fixed:ngram", "fixed:suffix", "router",
        EAGLE_ONLY, WHOLE_POOL, HYBRID, "oracle")


def tiny_copy_heavy(path: Path) -> Path:
    """Two kinds, one of them multi-turn, short enough for the tiny target's context."""
    rows = [
        {"id": "edit", "kind": "code_edit", "sources": ["test"],
         "messages": [{"role": "user",
                       "content": "Rename f to g:\ndef f(a, b):\n    return a + b"}]},
        {"id": "json", "kind": "json_multiturn", "sources": ["test"],
         "messages": [{"role": "user", "content": "def add(a, b)"},
                      {"role": "assistant", "content": '{"name": "add"}'},
                      {"role": "user", "content": "def mul(a, b)"}]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_quick_run_reports_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = pool_with_prompts(tmp_path)
    out = tmp_path / "out"
    threads = torch.get_num_threads()
    try:  # float32 and one thread: the tiny target's matrices are too small for bf16 or two
        assert main(["--pool", str(pool), "--quick", "--json", "--out", str(out),
                     "--copy-heavy", str(tiny_copy_heavy(tmp_path / "copy.jsonl")),
                     "--streams", "3", "--dtype", "float32", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    printed = json.loads(capsys.readouterr().out)
    md = (out / "model_free.md").read_text()
    for name in WORKLOADS:
        w = printed["workloads"][name]
        assert list(w["methods"]) == list(ROWS)
        for row in ROWS:
            assert set(w["methods"][row]) >= {"mat", "tokens_per_s", "x_plain",
                                              "x_hedgespec_eagle", "mat_x_oracle"}
        assert w["methods"]["plain"]["mat"] == pytest.approx(1.0)
        assert w["methods"][EAGLE_ONLY]["x_hedgespec_eagle"] == pytest.approx(1.0)
        assert w["methods"]["oracle"]["mat_x_oracle"] == pytest.approx(1.0)
        assert len(w["plain_passes"]) == 2 and min(w["plain_passes"]) > 0
        assert set(printed["sampling"][name]) == {"plain", EAGLE_ONLY, WHOLE_POOL}
        st = printed["streams"][name]
        assert st["streams"] == 3 and st["x_plain"] > 0
        assert "gate" not in st and st["time_model"].startswith(("fitted", "not fitted"))
        assert len(st["passes"]["plain"]) == len(st["passes"][WHOLE_POOL]) == 2
    assert printed["workloads"]["copy_heavy"]["kinds"] == ["code_edit", "json_multiturn"]
    assert printed["sampling"]["temperature"] > 0
    assert len(printed["targets"]) == 10
    assert all(isinstance(t["met"], bool) for t in printed["targets"].values())
    for row in ROWS:
        assert f"| {row} |" in md or f"| **{row}** |" in md
    for text in ("Default sampling", "concurrent streams (batched steps, the time loss)",
                 "Targets", "Run-to-run noise", "fresh model-free drafters", "cost model"):
        assert text in md
    assert (out / "model_free.png").stat().st_size > 0


def test_vendored_copy_heavy_workload_is_well_formed() -> None:
    rows = [json.loads(line) for line in COPY_HEAVY.read_text(encoding="utf-8").splitlines()]
    kinds = {r["kind"] for r in rows}
    assert kinds == {"code_edit", "quote_context", "summary", "json_multiturn"}
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        roles = [m["role"] for m in r["messages"]]
        assert roles[-1] == "user" and r["sources"]
        assert all(m["content"].strip() for m in r["messages"])
    multi = [r for r in rows if r["kind"] == "json_multiturn"]
    assert all(len(r["messages"]) == 5 for r in multi)
    assert (COPY_HEAVY.parent / "SOURCES.md").is_file()
