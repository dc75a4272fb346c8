"""The prompt-windows benchmark runs end to end on a tiny local pool and reports the sweep
beside the generalist, the router and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

from bench.prompt_windows import main
from tests.bench.test_hedgespec_bench import pool_with_prompts


def test_bench_writes_the_sweep_with_its_baselines(tmp_path: Path) -> None:
    pool = pool_with_prompts(tmp_path)
    out = tmp_path / "out"
    assert main(["--pool", str(pool), "--quick", "--threads", "1", "--out", str(out)]) == 0
    data = json.loads((out / "prompt_windows.json").read_text())
    assert set(data["rows"]) == {"generalist", "oracle", "router", "hedgespec W=0",
                                 "hedgespec W=16"}
    assert data["rows"]["hedgespec W=16"]["windows"] == 16
    # the oracle is each request's best fixed drafter: never below the generalist
    assert data["rows"]["oracle"]["mat"] >= data["rows"]["generalist"]["mat"] - 1e-9
    for r in data["rows"].values():
        assert r["mat"] > 0 and r["tokens_per_s"] > 0
        assert r["first_round_best"] is None or 0.0 <= r["first_round_best"] <= 1.0
    text = (out / "prompt_windows.md").read_text()
    assert "| hedgespec W=16 |" in text and "x oracle" in text
    assert (out / "prompt_windows.png").stat().st_size > 0

