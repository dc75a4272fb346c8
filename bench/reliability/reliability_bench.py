"""Reliability benchmark (issue 9): load, overload, disconnect storms, hot pool changes, a database
outage, replica convergence, a crash during a download, corrupt weights and input fuzzing, each
against a real `hedgespec serve` process on a loopback port, written up in one report.

    python -m bench.reliability.reliability_bench [--soak] [--out bench/results/reliability.md]

writes `bench/results/reliability.md` and `.json`. `--soak` adds a long constant-load run that
samples the server's memory (RSS) and scales the fuzz budget up. The database outage needs a
PostgreSQL server (`HEDGESPEC_TEST_POSTGRES_URL`, as in CI: `.ci/postgres.sh`); without one
that scenario is reported as not run.

The scenarios are those of `scenarios.py` and `reliability_faults.py`, which the CI suites in
`tests/reliability/` call with smaller sizes, so the report and CI measure the same things.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.tiny_pool import build_pool
from bench.paths import REPO, RESULTS
from bench.reliability.reliability_faults import (
    corrupt_drafters,
    database_outage,
    download_crash,
    replica_convergence,
)
from bench.reliability.reliability_report import render, totals, verdicts
from bench.reliability.scenarios import (
    KEY_FLAGS,
    disconnect_storm,
    hot_pool_under_load,
    load_test,
    proc_status,
    rate_limit_check,
    server_counters,
    server_log_problems,
    soak,
    start_server,
    wait_idle,
)


def run_fuzz_suite(out_json: Path, *, soak_run: bool) -> dict[str, Any]:
    """The Hypothesis fuzz suite (tests/reliability/test_fuzz.py), with its counts recorded."""
    env = {**os.environ, "HEDGESPEC_FUZZ_STATS": str(out_json)}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            str(REPO / "tests" / "reliability" / "test_fuzz.py")]
    if soak_run:
        args.append("--soak")
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=3600, check=False)
    stats = json.loads(out_json.read_text()) if out_json.is_file() else {}
    return {"pytest_exit": proc.returncode, "pytest_summary": proc.stdout.strip().splitlines()[-1:],
            **stats}


def scenario(results: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    print(f"[reliability] {name} ...", flush=True)
    started = time.monotonic()
    try:
        results[name] = fn()
    except Exception as exc:  # recorded: the report shows the scenario as failed
        results[name] = {"failed": f"{type(exc).__name__}: {exc}"}
    results[name + "_wall_s"] = round(time.monotonic() - started, 1)


LIMIT_FLAGS = ("--max-running", "2", "--max-queue", "14")  # capacity 16


def _limits_scenarios(results: dict[str, Any], pool: Path, root: Path,
                      args: argparse.Namespace) -> None:
    """On one server at its queue limits: load below and above them, disconnect storms, the
    optional soak, and its memory before and after."""
    limits = start_server(pool, root / "limits", *KEY_FLAGS, *LIMIT_FLAGS,
                          "--request-timeout", "120")
    try:
        pid, url = limits.proc.pid, limits.base_url
        results["rss_start"] = proc_status(pid)["rss_bytes"]
        scenario(results, "load_below_limit",
                 lambda: load_test(url, clients=8, duration_s=args.load_s))
        scenario(results, "load_above_limit",
                 lambda: load_test(url, clients=32, duration_s=args.load_s))
        scenario(results, "disconnect_storm",
                 lambda: disconnect_storm(url, pid, clients=16, waves=4, rounds=args.storm_rounds))
        if args.soak:
            scenario(results, "soak", lambda: soak(url, pid, duration_s=args.soak_s, clients=4))
        wait_idle(url)
        results["rss_end"] = proc_status(pid)["rss_bytes"]
        results["limits_counters"] = server_counters(url)
    finally:
        limits.stop()
        results["log_problems"] = server_log_problems(limits.log())


def _rate_limit_scenario(results: dict[str, Any], pool: Path, root: Path) -> None:
    rate = start_server(pool, root / "rate", *KEY_FLAGS, "--no-warmup", settings={
        "HEDGESPEC_RATE_LIMIT_RPS": "1", "HEDGESPEC_RATE_LIMIT_BURST": "5"})
    try:
        scenario(results, "rate_limit", lambda: rate_limit_check(rate.base_url, rps=1, burst=5))
    finally:
        rate.stop()


def _hot_pool_scenarios(results: dict[str, Any], pool: Path, root: Path, drafter_dir: Path,
                        args: argparse.Namespace) -> None:
    """On one server polling its pool fast: hot add/remove cycles, then corrupt drafters."""
    hot = start_server(pool, root / "hot", *KEY_FLAGS, "--max-running", "8",
                       settings={"HEDGESPEC_POOL_SYNC_INTERVAL_S": "0.1"})
    try:
        scenario(results, "hot_pool", lambda: hot_pool_under_load(
            hot.base_url, drafter_dir, cycles=args.cycles, clients=3))
        scenario(results, "corrupt_drafters",
                 lambda: corrupt_drafters(hot.base_url, root / "corrupt", drafter_dir))
    finally:
        hot.stop()
        results["log_problems"] += server_log_problems(hot.log())


def _registry_scenarios(results: dict[str, Any], pool: Path, root: Path,
                        args: argparse.Namespace) -> None:
    """Servers of their own: the database outage (PostgreSQL only), replica convergence and
    kill -9 during a download."""
    pg_url = os.environ.get("HEDGESPEC_TEST_POSTGRES_URL")
    if pg_url:
        scenario(results, "database_outage", lambda: database_outage(
            pool, root / "db", pg_url, outage_s=args.outage_s))
    else:
        results["database_outage"] = {"skipped": "HEDGESPEC_TEST_POSTGRES_URL is not set"}
    scenario(results, "replica_convergence", lambda: replica_convergence(
        pool, root / "replicas", pg_url, changes=args.replica_changes))
    scenario(results, "download_crash", lambda: download_crash(pool, root / "crash"))


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every scenario, in the report's order, on the tiny random test pool."""
    results: dict[str, Any] = {"sizes": {k: v for k, v in vars(args).items() if k != "out"}}
    with tempfile.TemporaryDirectory(prefix="hedgespec-reliability-") as tmp:
        root = Path(tmp)
        pool = build_pool(root / "pool")
        drafter_dir = pool.parent / "drafters" / "alpha"
        _limits_scenarios(results, pool, root, args)
        _rate_limit_scenario(results, pool, root)
        _hot_pool_scenarios(results, pool, root, drafter_dir, args)
        _registry_scenarios(results, pool, root, args)
        scenario(results, "fuzz", lambda: run_fuzz_suite(root / "fuzz.json", soak_run=args.soak))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--soak", action="store_true",
                        help="add the long soak run (and 10x fuzzing)")
    parser.add_argument("--soak-s", type=float, default=600.0, help="soak duration, seconds")
    parser.add_argument("--load-s", type=float, default=15.0, help="each load run, seconds")
    parser.add_argument("--storm-rounds", type=int, default=3, help="disconnect storm rounds")
    parser.add_argument("--outage-s", type=float, default=6.0, help="database outage, seconds")
    parser.add_argument("--cycles", type=int, default=50, help="hot add/remove cycles")
    parser.add_argument("--replica-changes", type=int, default=10,
                        help="pool changes timed between two replicas")
    parser.add_argument("--out", type=Path, default=RESULTS / "reliability.md")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run_all(args)
    results["totals"] = totals(results)
    meta = {
        "command": " ".join(["python -m bench.reliability.reliability_bench",
                             *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f})",
        "wall_s": time.monotonic() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(results, meta))
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2, default=str) + "\n")
    held = all(ok for _, ok, _ in verdicts(results))
    print(f"[reliability] wrote {args.out} ({'every claim holds' if held else 'SOME CLAIMS FAIL'})")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
