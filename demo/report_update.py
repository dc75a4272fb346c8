"""Re-measure some of a built pool's MAT tables in place, keeping a record of what they replace.

    python -m demo.report_update --pool demo/pool --temperatures 0 [--dtype auto] [--workers 2]
        [--drafters medical news]

A pool's report is written by its build on the build machine, in the dtype `hedgespec serve`
resolves there (bf16 on a CPU with native bf16, else fp32). Re-measuring a table on another
machine or in another dtype must not erase the figures it replaces: each re-measured table
goes where the build put it (greedy at the top level, others under `sampling`), the tree,
token budget and prompts are taken from the table it replaces (so the two compare cell by
cell), and `remeasured` keeps the replaced table's dtype, MAT, per-prompt counts and checks,
which `REPORT.md` shows. The build section is left as it is.

With `--drafters`, only those drafters' rows are measured (after one of them was retrained,
`demo/retrain.py`); the other rows keep their per-prompt counts, so the rows must be measured in
the table's own dtype: a table mixing dtypes would compare cells that are not comparable.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path
from typing import Any

from core.model.precision import cpu_has_native_bf16
from demo.report import (
    Cell,
    ReportSpec,
    measure_jobs,
    measure_reports,
    report_dict,
    resolved_dtype,
    write_report,
)
from demo.report_md import render_report_md


def table_at(report: dict[str, Any], temperature: float) -> dict[str, Any] | None:
    """The table of `report` measured at `temperature` (greedy is the top level)."""
    if temperature == 0.0:
        return report
    return report.get("sampling", {}).get(str(temperature))


def spec_like(table: dict[str, Any], dtype: str) -> ReportSpec:
    """The measurement of an existing table, in `dtype`."""
    m = table["measurement"]
    tree = m["tree"]
    return ReportSpec(
        top_k=tree["top_k"], depth=tree["depth"], total_tokens=tree["total_tokens"],
        max_new_tokens=m["max_new_tokens"], prompts_per_domain=m["prompts_per_domain"],
        temperatures=(m["temperature"],), dtype=dtype,
    )


def replace_table(report: dict[str, Any], table: dict[str, Any], note: dict[str, Any]
                  ) -> dict[str, Any]:
    """A copy of `report` with `table` in its temperature's place and a `remeasured` entry
    (`note` plus the replaced table's measurement, MAT, per-prompt counts and checks)."""
    temperature = float(table["measurement"]["temperature"])
    old = table_at(report, temperature)
    if old is None:
        raise ValueError(f"the report has no table at temperature {temperature}")
    if old["drafters"] != table["drafters"] or old["domains"] != table["domains"]:
        raise ValueError("the new table must have the same drafters and domains")
    entry = {**note, "temperature": temperature, "dtype": table["measurement"]["dtype"],
             "replaced": {k: old[k] for k in ("measurement", "mat", "average", "per_prompt",
                                             "checks")}}
    rest = {k: v for k, v in report.items() if k not in table and k != "remeasured"}
    if temperature == 0.0:
        new = {**table, **rest}
    else:
        new = {**report, "sampling": {**report["sampling"], str(temperature): table}}
    new["remeasured"] = [*report.get("remeasured", []), entry]
    return new


def stored_cells(table: dict[str, Any]) -> dict[tuple[str, str], Cell]:
    """Every (drafter, domain) cell of a table, from its per-prompt counts."""
    return {(dr, do): Cell(tuple(c["tokens"]), tuple(c["rounds"]))
            for dr, row in table["per_prompt"].items() for do, c in row.items()}


def check_rows(table: dict[str, Any], rows: list[str], spec: ReportSpec) -> None:
    """Rows measured alone must be real drafters of the table and share its dtype."""
    unknown = sorted(set(rows) - set(table["drafters"]))
    if unknown:
        raise SystemExit(f"no drafter {', '.join(unknown)} in the table "
                         f"(drafters: {', '.join(table['drafters'])})")
    have, want = resolved_dtype(spec.dtype), table["measurement"]["dtype"]
    if have != want:
        raise SystemExit(f"the table at temperature {table['measurement']['temperature']} is "
                         f"{want}, rows would be measured in {have}: re-measure the whole table "
                         f"first (without --drafters) or pass --dtype {want}")


def remeasure(pool_dir: Path, temperatures: list[float], dtype: str, workers: int,
              rows: list[str] | None = None) -> dict[str, Any]:
    """Measure the tables at `temperatures` again (only the drafters `rows` when given) and
    write report.json and REPORT.md."""
    report = json.loads((pool_dir / "report.json").read_text())
    drafters, domains = report["drafters"], report["domains"]
    for temperature in temperatures:
        old = table_at(report, temperature)
        if old is None:
            raise SystemExit(f"no table at temperature {temperature} in {pool_dir}/report.json")
        spec = spec_like(old, dtype)
        if rows:
            check_rows(old, rows, spec)
        start = time.perf_counter()
        if rows:
            jobs = [(dr, do, temperature) for dr in rows for do in domains]
            fresh = measure_jobs(pool_dir / "pool.json", jobs, spec, workers)
            cells = {**stored_cells(old), **{(dr, do): c for (dr, do, _), c in fresh.items()}}
        else:
            cells = measure_reports(pool_dir / "pool.json", drafters, domains, spec,
                                    workers)[temperature]
        table = report_dict(cells, drafters, domains, spec, temperature)
        note = {"date": datetime.date.today().isoformat(), "workers": workers,
                "native_bf16": cpu_has_native_bf16(),
                "seconds": round(time.perf_counter() - start), "rows": rows or drafters}
        report = replace_table(report, table, note)
        write_report(report, pool_dir)
        (pool_dir / "REPORT.md").write_text(render_report_md(report))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Re-measure MAT tables of a pool's report.")
    parser.add_argument("--pool", type=Path, required=True, help="directory holding report.json")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0])
    parser.add_argument("--dtype", default="auto", help="auto (as hedgespec serve), float32, "
                                                        "bfloat16")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--drafters", nargs="+", default=None,
                        help="measure only these drafters' rows (in the table's dtype)")
    args = parser.parse_args(argv)
    report = remeasure(args.pool, args.temperatures, args.dtype, args.workers, args.drafters)
    for temperature in args.temperatures:
        table = table_at(report, temperature)
        assert table is not None
        print(f"temperature {temperature}: {json.dumps(table['checks'], indent=1)}")


if __name__ == "__main__":
    main()
