"""The batching benchmark: its arithmetic and report, and a tiny in-process smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.batching.batching_bench import main, paired_order
from bench.batching.batching_report import Cell, render, summarise
from bench.harness.tiny_pool import build_pool
from bench.speed.gateway_bench import Run


def cell(where: str, mode: str, streams: int, tokens: int, wall: float) -> Cell:
    # each stream: first token at 0.1 s, the last at 0.1 + (tokens - 1) * 0.01 s
    runs = [Run(0.1, 0.1 + (tokens - 1) * 0.01, tokens) for _ in range(streams)]
    return Cell(where, mode, streams, runs, wall)


def test_aggregates_ratios_and_verdicts() -> None:
    cells = [cell("in-process", "batched", 8, 10, 1.0),
             cell("in-process", "round-robin", 8, 10, 4.0),
             cell("in-process", "batched", 1, 10, 1.0),
             cell("in-process", "round-robin", 1, 10, 0.9)]
    s = summarise(cells)
    by = {(r["mode"], r["streams"]): r for r in s["rows"]}
    assert by[("batched", 8)]["aggregate_tps"] == pytest.approx(80.0)
    assert by[("round-robin", 8)]["aggregate_tps"] == pytest.approx(20.0)
    assert by[("batched", 8)]["itl_ms"] == pytest.approx(10.0)
    ratios = {x["streams"]: x["aggregate"] for x in s["ratios"]}
    assert ratios == pytest.approx({1: 0.9, 8: 4.0})
    meta = {"command": "x", "date": "d", "machine": "m", "pool": "p", "model": "t", "drafters": [],
            "threads": 2, "dtype": "float32", "policy": "auto", "tree": "T", "max_tokens": 10,
            "repeats": 1, "max_step_tokens": 512}
    text = render(s, meta)
    assert "8 streams: batched / round-robin aggregate 4.00x (target >= 2x): PASS" in text
    assert ("1 stream: batched / round-robin 0.90x (median of 1 pair(s), 0.90-0.90; "
            "target >= 0.95): MISS") in text


def test_ratio_is_the_median_of_paired_runs() -> None:
    # Each pair's own ratio is what the schedulers differ by (1.0, 1.0, 0.7 here); the ratio of
    # the modes' medians (8.0 / 9.1 = 0.88 with the extra round-robin run) would mix pairs
    # measured under different machine load.
    walls = {"batched": (1.0, 1.25, 2.0), "round-robin": (1.0, 1.25, 1.4)}
    cells = [cell("gateway", mode, 1, 10, w) for mode, ws in walls.items() for w in ws]
    cells.append(cell("gateway", "round-robin", 1, 10, 0.8))  # an unpaired extra run
    ratio = summarise(cells)["ratios"][0]
    assert ratio["pairs"] == 3
    assert ratio["aggregate"] == pytest.approx(1.0)
    assert (ratio["low"], ratio["high"]) == pytest.approx((0.7, 1.0))


def test_pairs_alternate_their_order() -> None:
    assert list(paired_order(3)) == ["batched", "round-robin", "round-robin", "batched",
                                     "batched", "round-robin"]


def test_quick_in_process_run_writes_the_report(tmp_path: Path) -> None:
    pool = build_pool(tmp_path / "pool", hidden=32)
    out = tmp_path / "batching.md"
    assert main(["--quick", "--no-gateway", "--pool", str(pool), "--threads", "1", "--dtype",
                 "float32", "--max-tokens", "4", "--out", str(out)]) == 0
    summary = json.loads(out.with_suffix(".json").read_text())["summary"]
    assert {(r["mode"], r["streams"]) for r in summary["rows"]} == {
        (m, n) for m in ("batched", "round-robin") for n in (1, 2)}
    assert all(r["tokens"] == 4 * r["streams"] for r in summary["rows"])
    assert (out.with_suffix(".png").stat().st_size > 0
            and "| in-process | 2 | batched |" in out.read_text())


def test_each_scheduler_serves_the_whole_pool_with_its_own_model_free_members(
        tmp_path: Path) -> None:
    from bench.batching.batching_bench import engines
    from core.config import EngineConfig
    from core.engine import SpecEngine

    pool = build_pool(tmp_path / "pool", hidden=32)
    spec = json.loads(pool.read_text())
    spec["drafters"].insert(1, {"id": "lookup", "kind": "ngram"})
    pool.write_text(json.dumps(spec))
    base = SpecEngine.from_pool_file(pool, EngineConfig(dtype="float32"))
    built = engines(base)
    batched, robin = built["batched"], built["round-robin"]
    assert batched.snapshot.ids == robin.snapshot.ids == base.snapshot.ids  # lookup included
    assert batched.config.batching and not robin.config.batching
    assert len({id(e.snapshot.free["lookup"]) for e in (base, batched, robin)}) == 3
    shared = next(iter(base.snapshot.drafters))
    assert batched.snapshot.drafters[shared] is base.snapshot.drafters[shared]  # not reloaded
