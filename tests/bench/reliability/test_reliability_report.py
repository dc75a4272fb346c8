"""The reliability report renders from a run's results: the committed run, a run with a
failed scenario, and an empty run (every scenario missing) all give a report, and a claim
that does not hold is marked NO rather than hidden."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from bench.reliability.reliability_report import render, totals, verdicts

RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results" / "reliability.json"
META = {"command": "python -m bench.reliability.reliability_bench", "date": "today",
        "machine": "x", "wall_s": 1.0}


def committed() -> dict[str, Any]:
    results: dict[str, Any] = json.loads(RESULTS.read_text())["results"]
    return results


def test_the_committed_run_renders_with_every_claim_holding() -> None:
    results = committed()
    claims = verdicts(results)
    assert claims and all(ok for _, ok, _ in claims), [c for c in claims if not c[1]]
    report = render(results, META)
    assert "**NO**" not in report and report.count("| yes |") == len(claims)
    assert totals(results)["requests"] == results["totals"]["requests"]


def test_a_failed_replica_scenario_is_a_failing_claim() -> None:
    results = copy.deepcopy(committed())
    results["replica_convergence"] = {"failed": "AssertionError: timed out"}
    claims = {claim: (ok, evidence) for claim, ok, evidence in verdicts(results)}
    (ok, evidence) = next(v for k, v in claims.items() if k.startswith("replicas converge"))
    assert not ok and "timed out" in evidence
    assert "| **NO** |" in render(results, META)


def test_slow_convergence_does_not_hold() -> None:
    results = copy.deepcopy(committed())
    results["replica_convergence"] = {**results["replica_convergence"], "add_max_s": 9.0,
                                      "held": False}
    assert "| **NO** |" in render(results, META)


def test_an_empty_run_renders_as_not_run() -> None:
    report = render({}, META)
    assert "not run" in report and "| **NO** |" in report
