"""The estimator-calibration benchmark runs end to end on a tiny local pool: both ÂL forms per
completed round window, equal under greedy decoding (γ is the indicator there)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.learner.estimator_calibration import main
from tests.bench.learner.test_hedgespec_bench import pool_with_prompts


def test_bench_writes_both_forms_per_temperature(tmp_path: Path) -> None:
    pool = pool_with_prompts(tmp_path)
    out = tmp_path / "out"
    main(["--pool", str(pool), "--per-domain", "1", "--max-new-tokens", "16",
          "--temperatures", "0,1", "--out", str(out)])
    data = json.loads((out / "estimator_calibration.json").read_text())
    assert set(data["summary"]) == {"0.0", "1.0"}
    greedy = [s for s in data["samples"] if s["temperature"] == 0.0]
    assert greedy and all(s["tree"] == s["paper"] for s in greedy)
    for s in data["samples"]:
        assert s["paper"] >= 1.0 and s["tree"] >= 1.0 and s["realised"] >= 1
    text = (out / "estimator_calibration.md").read_text()
    assert "| 1.0 |" in text and "bias tree" in text
    assert (out / "estimator_calibration.png").stat().st_size > 0
