"""The prompt-windows benchmark runs end to end on a tiny local pool and reports the sweep
beside the generalist, the router and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learner.prompt_windows import main
from tests.bench.learner.test_hedgespec_bench import pool_with_prompts


def test_bench_writes_the_sweep_with_its_baselines(tmp_path: Path) -> None:
    pool = pool_with_prompts(tmp_path)
    out = tmp_path / "out"
    assert main(["--pool", str(pool), "--quick", "--threads", "1", "--prior-mixes", "0.25",
                 "--out", str(out)]) == 0
    data = json.loads((out / "prompt_windows.json").read_text())
    assert set(data["workloads"]) == {"held-out", "mismatched"}
    for workload in data["workloads"].values():
        rows = workload["rows"]
        assert set(rows) == {"generalist", "oracle", "router", "hedgespec W=0",
                             "hedgespec W=16", "hedgespec W=16 prior 0.25",
                             "hedgespec W=16 losses"}
        assert rows["hedgespec W=16 prior 0.25"]["prior_mix"] == 0.25
        assert rows["hedgespec W=16"]["windows"] == 16
        assert rows["hedgespec W=16"]["form"] == "prior"
        assert rows["hedgespec W=16 losses"]["form"] == "losses"
        # the oracle is each request's best fixed drafter: never below the generalist
        assert rows["oracle"]["mat"] >= rows["generalist"]["mat"] - 1e-9
        for r in rows.values():
            assert r["mat"] > 0 and r["tokens_per_s"] > 0
            assert r["first_round_best"] is None or 0.0 <= r["first_round_best"] <= 1.0
    text = (out / "prompt_windows.md").read_text()
    assert "| hedgespec W=16 losses |" in text and "## mismatched" in text
    assert (out / "prompt_windows.png").stat().st_size > 0
