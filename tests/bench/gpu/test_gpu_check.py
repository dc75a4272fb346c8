"""bench/gpu/gpu_check.py only runs in earnest on a lent GPU; its CPU path (--small) runs here so a
change that breaks the script is caught before the next device session, not during it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_small_gpu_check_runs_on_cpu_and_writes_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu.gpu_check", "--small", "--out", str(tmp_path),
         "--skip", "served_default,demo_pool,compile"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check_small.json").read_text())
    plain = results["plain_decode"]
    assert plain["lean_forward"] == 1.0 and plain["floor_ms"] > 0
    for rows in (1, 8):
        assert plain[f"eager_{rows}_rows_ms_per_step"] > 0
    components = results["components"]
    for key in ("target_verify_61_tokens_ms", "drafter_tree_step_10_nodes_ms",
                "batched_eval_8_drafters_8_pairs_ms", "batched_eval_32_drafters_8_pairs_ms",
                "normalhedge_update_8_ms"):
        assert components[key] > 0, key
    engine = results["engine_constructed"]
    assert engine["copy_drafter_mat"] > 2 * engine["plain_mat"]  # the copying drafter is accepted
    batching = results["batching"]
    for mode in ("batched", "round_robin"):
        for n in (1, 16):
            assert batching[f"{mode}_{n}_streams_tokens_per_s"] > 0
    assert batching["batched_16_over_1_stream"] > 0
    assert "demo_pool" not in results and "compile" not in results
    assert "served_default" not in results
