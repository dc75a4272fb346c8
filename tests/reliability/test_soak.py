"""Soak runs (only with `--soak` or HEDGESPEC_SOAK=1): constant streaming load for
HEDGESPEC_SOAK_S seconds (default 300) with the server's RSS sampled, then repeated disconnect
storms. Memory must stay flat after warm-up (growth under RSS_BOUND) and nothing may leak from
storm to storm. `python -m bench.reliability.reliability_bench --soak` runs the same and writes
the report."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.server import ServerProcess
from bench.reliability import scenarios as R
from tests.reliability.judge import assert_clean_log, assert_storm_left_nothing

pytestmark = [pytest.mark.soak, pytest.mark.timeout(7200)]
RSS_BOUND = 64 * 2**20
SOAK_S = float(os.environ.get("HEDGESPEC_SOAK_S", "300"))


@pytest.fixture(scope="module")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = R.start_server(pool_file, tmp_path_factory.mktemp("soak"), *R.KEY_FLAGS,
                          "--max-running", "2", "--max-queue", "14", "--request-timeout", "120")
    yield proc
    proc.stop()
    assert_clean_log(proc.log())


def test_memory_is_flat_under_constant_load(server: ServerProcess) -> None:
    result = R.soak(server.base_url, server.proc.pid, duration_s=SOAK_S, clients=4)
    load = result["load"]
    assert load["errors"] == 0 and load["rejected_429"] == 0 and load["ok"] > 0, load
    assert result["rss_growth_bytes"] < RSS_BOUND, result["rss_samples"]


def test_repeated_disconnect_storms_leak_nothing(server: ServerProcess) -> None:
    storm = R.disconnect_storm(server.base_url, server.proc.pid, clients=16, waves=4, rounds=10)
    assert_storm_left_nothing(storm)
    rss = [r["rss_bytes"] for r in storm["rounds"]]
    assert rss[-1] - rss[0] < RSS_BOUND, rss
