"""Retraining some specialists of a built pool in place (`demo/retrain.py`): only the named
drafters change, their rows are measured again in every table, the others keep their counts,
and the run is recorded; what cannot finish is refused before any training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from demo.retrain import main as retrain


def files(pool: Path, drafter: str) -> bytes:
    return (pool / "drafters" / drafter / "model.safetensors").read_bytes()


def rows_except(table: dict[str, Any], drafter: str) -> dict[str, Any]:
    return {k: v for k, v in table["per_prompt"].items() if k != drafter}


@pytest.fixture()
def pool(tmp_path: Path, quick_pool: Path) -> Path:
    out = tmp_path / "pool"
    shutil.copytree(quick_pool.parent, out)
    return out


def test_retrain_replaces_one_specialist_and_its_rows(pool: Path,
                                                      quick_build: tuple[Path, Path]) -> None:
    (rollouts,) = quick_build[1].glob("build-*/rollouts.jsonl")
    before = json.loads((pool / "report.json").read_text())
    others = {d: files(pool, d) for d in before["drafters"] if d != "sql"}
    old_sql = files(pool, "sql")
    retrain(["--pool", str(pool), "--drafters", "sql", "--quick", "--rollouts", str(rollouts),
             "--set", 'specialist_epochs={"sql": 2}', "--workers", "1"])
    after = json.loads((pool / "report.json").read_text())
    assert files(pool, "sql") != old_sql
    assert {d: files(pool, d) for d in others} == others
    steps = before["build"]["drafters"]["sql"]["steps"]
    assert after["build"]["drafters"]["sql"]["steps"] == 2 * steps
    (entry,) = after["build"]["retrained"]
    assert entry["drafters"] == ["sql"] and entry["epochs"] == {"sql": 2.0}
    # what it learnt from: the quick build's 3 greedy + 1 sampled sql rollouts
    assert entry["rollouts"]["sql"]["sequences"] == 4
    assert entry["rollouts"]["sql"]["by_temperature"] == {"0.0": 3, "1.0": 1}
    for new, old in ((after, before), (after["sampling"]["1.0"], before["sampling"]["1.0"])):
        assert rows_except(new, "sql") == rows_except(old, "sql")
        assert new["measurement"] == old["measurement"]
    assert [e["rows"] for e in after["remeasured"]] == [["sql"], ["sql"]]
    text = (pool / "REPORT.md").read_text()
    assert "Retrained after the build on" in text and "sql 2 epochs" in text
    assert "sql on 4 rollouts (3 at temperature 0.0 + 1 at temperature 1.0" in text
    assert "rows sql only" in text


def test_what_cannot_finish_is_refused_before_training(pool: Path) -> None:
    report = json.loads((pool / "report.json").read_text())
    with pytest.raises(SystemExit, match="not a specialist of this pool: generalist"):
        retrain(["--pool", str(pool), "--drafters", "generalist", "--quick"])
    other = "bfloat16" if report["measurement"]["dtype"] == "float32" else "float32"
    report["sampling"]["1.0"]["measurement"]["dtype"] = other
    (pool / "report.json").write_text(json.dumps(report))
    with pytest.raises(SystemExit, match=f"temperature 1.0 is {other}.*re-measure it first"):
        retrain(["--pool", str(pool), "--drafters", "sql", "--quick"])
