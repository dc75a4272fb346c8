"""Re-measuring a pool's MAT tables in place (`demo/report_update.py`): the new table takes the
old one's place, everything else stays, and the replaced figures are kept and shown."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from demo.domains import POOL_DIR
from demo.report import Cell, ReportSpec, report_dict
from demo.report_md import render_report_md
from demo.report_update import check_rows, replace_table, spec_like, table_at
from demo.report_update import main as report_update

NOTE = {"date": "2026-12-03", "workers": 2, "native_bf16": False, "seconds": 60}


@pytest.fixture()
def shipped() -> dict[str, Any]:
    """The shipped report as its build wrote it (without any later re-measurement)."""
    report = json.loads((POOL_DIR / "report.json").read_text())
    return {k: v for k, v in report.items() if k != "remeasured"}


def shifted_table(report: dict[str, Any], temperature: float, extra_round: int) -> dict[str, Any]:
    """The report's table at `temperature` re-made in fp32 with every prompt taking
    `extra_round` more rounds (a different measurement with the same shape)."""
    old = table_at(report, temperature)
    assert old is not None
    cells = {(dr, do): Cell(tuple(c["tokens"]), tuple(r + extra_round for r in c["rounds"]))
             for dr, row in old["per_prompt"].items() for do, c in row.items()}
    spec = spec_like(old, "float32")
    return report_dict(cells, old["drafters"], old["domains"], spec, temperature)


def test_a_greedy_table_replaces_the_top_level_and_keeps_the_rest(shipped: dict) -> None:
    original = copy.deepcopy(shipped)
    new = replace_table(shipped, shifted_table(shipped, 0.0, 1), NOTE)
    assert shipped == original  # the input is not modified
    assert new["measurement"]["dtype"] == "float32"
    assert new["mat"] != shipped["mat"] and new["mat"][0][0] < shipped["mat"][0][0]
    assert new["sampling"] == shipped["sampling"] and new["build"] == shipped["build"]
    (entry,) = new["remeasured"]
    assert entry["temperature"] == 0.0 and entry["dtype"] == "float32"
    assert entry["replaced"]["mat"] == shipped["mat"]
    assert entry["replaced"]["checks"] == shipped["checks"]
    assert entry["replaced"]["measurement"] == shipped["measurement"]
    assert entry["replaced"]["per_prompt"] == shipped["per_prompt"]


def test_a_sampled_table_goes_under_sampling_and_entries_accumulate(shipped: dict) -> None:
    once = replace_table(shipped, shifted_table(shipped, 0.0, 1), NOTE)
    twice = replace_table(once, shifted_table(once, 1.0, 2), NOTE)
    assert twice["mat"] == once["mat"]
    assert twice["sampling"]["1.0"]["measurement"]["dtype"] == "float32"
    assert twice["sampling"]["1.0"]["mat"] != shipped["sampling"]["1.0"]["mat"]
    assert [e["temperature"] for e in twice["remeasured"]] == [0.0, 1.0]
    assert twice["remeasured"][1]["replaced"]["mat"] == shipped["sampling"]["1.0"]["mat"]


def test_a_table_of_other_drafters_or_temperature_is_refused(shipped: dict) -> None:
    table = shifted_table(shipped, 0.0, 0)
    with pytest.raises(ValueError, match="same drafters"):
        replace_table(shipped, {**table, "drafters": table["drafters"][:-1]}, NOTE)
    table["measurement"] = {**table["measurement"], "temperature": 0.5}
    with pytest.raises(ValueError, match=r"no table at temperature 0\.5"):
        replace_table(shipped, table, NOTE)


def test_report_md_names_each_dtype_and_shows_the_replaced_figures(shipped: dict) -> None:
    new = replace_table(shipped, shifted_table(shipped, 0.0, 1), NOTE)
    text = render_report_md(new)
    assert "greedy (float32; tree" in text
    assert f"temperature 1.0 ({shipped['sampling']['1.0']['measurement']['dtype']}; tree" in text
    replaced = text.split("## Re-measured after the build")[1].split("## How the tables")[0]
    assert "float32 on 2026-12-03 (a CPU without native bf16" in replaced
    assert f"replacing {shipped['measurement']['dtype']}" in replaced
    old_oracle = shipped["checks"]["oracle_over_generalist"]
    assert f"oracle on the mixed workload: {old_oracle:.3f}x" in replaced
    assert f"| {shipped['mat'][0][0]:.2f} |" in replaced.split("\n| python |")[0]
    assert "## Re-measured after the build" not in render_report_md(shipped)


def test_the_command_remeasures_one_row_of_a_built_pool(tmp_path: Path, quick_pool: Path) -> None:
    """End to end on a quick-built pool: the medical drafter's row of the temperature-1 table is
    measured again with the engine (in the table's dtype, as rows alone must be), report.json
    and REPORT.md are rewritten, the other rows and the greedy table are untouched. (One row,
    not the whole table: the whole table's measurement is the build's own, which made this
    pool; this is a third of the time.)"""
    pool = tmp_path / "pool"
    shutil.copytree(quick_pool.parent, pool)
    before = json.loads((pool / "report.json").read_text())
    old = before["sampling"]["1.0"]
    for drafter in ("medical", "news"):  # planted: one round more than measured, every prompt
        for cell in old["per_prompt"][drafter].values():
            cell["rounds"] = [r + 1 for r in cell["rounds"]]
    (pool / "report.json").write_text(json.dumps(before))
    report_update(["--pool", str(pool), "--temperatures", "1.0", "--drafters", "medical",
                   "--dtype", old["measurement"]["dtype"], "--workers", "1"])
    after = json.loads((pool / "report.json").read_text())
    assert after["mat"] == before["mat"] and after["build"] == before["build"]
    sampled = after["sampling"]["1.0"]
    assert sampled["measurement"] == old["measurement"]
    # the medical row was measured again (the planted rounds are gone), the others kept, the
    # planted news row included
    assert sampled["per_prompt"]["medical"] != old["per_prompt"]["medical"]
    assert {d: r for d, r in sampled["per_prompt"].items() if d != "medical"} == {
        d: r for d, r in old["per_prompt"].items() if d != "medical"}
    (entry,) = after["remeasured"]
    assert entry["rows"] == ["medical"] and entry["workers"] == 1 and entry["seconds"] >= 0
    assert entry["replaced"]["per_prompt"] == old["per_prompt"]
    assert "## Re-measured after the build" in (pool / "REPORT.md").read_text()


def test_spec_like_keeps_the_measurement() -> None:
    table = {"measurement": {"tree": {"top_k": 3, "depth": 5, "total_tokens": 9},
                             "max_new_tokens": 17, "prompts_per_domain": 4, "temperature": 1.0}}
    assert spec_like(table, "float32") == ReportSpec(top_k=3, depth=5, total_tokens=9,
                                                     max_new_tokens=17, prompts_per_domain=4,
                                                     temperatures=(1.0,), dtype="float32")


def test_rows_alone_need_known_drafters_and_the_tables_dtype(shipped: dict) -> None:
    table = shifted_table(shipped, 0.0, 0)  # float32
    check_rows(table, ["medical"], spec_like(table, "float32"))
    with pytest.raises(SystemExit, match="no drafter cooking"):
        check_rows(table, ["cooking"], spec_like(table, "float32"))
    with pytest.raises(SystemExit, match="is float32, rows would be measured in bfloat16"):
        check_rows(table, ["medical"], spec_like(table, "bfloat16"))
