"""Faults injected into a serving gateway (issue 9, item 3), each on real server processes.

- 50 hot add/remove cycles of a drafter while clients stream: zero failed requests, and a
  stream pinned to the drafter being removed still completes.
- Corrupt drafter files (garbage, truncated, huge header, wrong shapes, unreadable or missing
  config, another target's drafter, a pickle payload) end in `failed`, never in a crash; the
  payload is not executed.
- kill -9 during a Hub download: the registry on disk is consistent, the drafter stays
  `downloading`, and a restart resumes the download (only the missing bytes) to `ready`.
  (Byte-level resume of the download function itself: tests/registry/test_hub_resume.py;
  corrupt transfers and checksum failures: tests/registry/test_fetcher.py.)
- The registry database (PostgreSQL behind a TCP proxy) goes away mid-run: generation keeps
  working, the admin API answers 503 `registry_unavailable`, and everything recovers when it
  returns. Needs HEDGESPEC_TEST_POSTGRES_URL (CI starts PostgreSQL with .ci/postgres.sh).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness.postgres import POSTGRES_ENV
from bench.harness.server import ServerProcess
from bench.reliability import reliability_faults as S
from bench.reliability import scenarios as R
from tests.reliability.judge import assert_clean_log

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def hot_server(pool_file: Path,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = R.start_server(pool_file, tmp_path_factory.mktemp("hot"), *R.KEY_FLAGS,
                          "--max-running", "8", settings={"HEDGESPEC_POOL_SYNC_INTERVAL_S": "0.1"})
    yield proc
    proc.stop()
    assert_clean_log(proc.log())


def test_fifty_hot_add_remove_cycles_under_load(hot_server: ServerProcess, pool_file: Path) -> None:
    result = R.hot_pool_under_load(hot_server.base_url, pool_file.parent / "drafters" / "alpha",
                                   cycles=50, clients=3)
    load = result["load"]
    assert result["cycles"] == 50
    assert load["requests"] >= 50 and load["ok"] == load["requests"], load
    assert load["errors"] == 0 and load["rejected_429"] == 0
    assert result["pinned_streams"] == {"ok": 50}, result["pinned_failures"]
    assert result["pinned_tokens"] == 50 * 12
    R.wait_idle(hot_server.base_url)


def test_corrupt_drafter_files_end_in_failed(hot_server: ServerProcess, pool_file: Path,
                                             tmp_path: Path) -> None:
    result = S.corrupt_drafters(hot_server.base_url, tmp_path,
                                pool_file.parent / "drafters" / "alpha")
    assert set(result["statuses"].values()) == {"failed"}, result
    assert all(result["errors"].values())
    assert not result["payload_executed"]
    assert result["generation_after"] == 200 and result["held"], result


def test_kill_9_during_a_download_leaves_it_consistent_and_resumable(
    pool_file: Path, tmp_path: Path
) -> None:
    result = S.download_crash(pool_file, tmp_path / "crash")
    assert result["exit_status"] == -9
    assert result["integrity"] == "ok" and result["foreign_key_violations"] == 0, result
    assert result["status_on_disk"] == "downloading", result
    assert result["partial_files"], "no partial download left to resume"
    assert result["final_status"] == "ready+serving" and result["generation_with_it"] == 200, result
    assert 0 < result["bytes_after_restart"] < result["file_bytes"], result  # resumed
    assert_clean_log((tmp_path / "crash" / "server.log").read_text())  # the restarted server's


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get(POSTGRES_ENV), reason=f"{POSTGRES_ENV} is not set")
def test_database_outage_keeps_serving_and_recovers(pool_file: Path, tmp_path: Path) -> None:
    result = S.database_outage(pool_file, tmp_path / "db", os.environ[POSTGRES_ENV], outage_s=3)
    assert result["admin_before"] == 200
    assert (result["admin_during"] == [503]
            and result["admin_codes_during"] == ["registry_unavailable"])
    assert result["admin_slowest_s"] < 10  # answered, not hung
    assert result["health_during"] == 200 and result["generation_during"] == 200
    assert result["ready_during"] == 200  # readiness reports the registry, never fails on it
    load = result["load"]
    assert load["ok"] > 0 and load["errors"] == 0 and load["rejected_429"] == 0, load
    assert result["admin_after"] == 200 and result["recovered_drafter"] == "ready+serving"
    assert result["log_problems"] == [], result["log_problems"]
    assert result["held"], result


def test_proxy_cut_really_refuses_connections() -> None:
    """The outage harness itself: after cut() nothing connects, after restore() it does."""
    import socket
    import threading

    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(8)
    stop = threading.Event()

    def echo() -> None:
        upstream.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = upstream.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(conn.recv(100))

    worker = threading.Thread(target=echo, daemon=True)
    worker.start()
    proxy = S.TcpProxy(upstream.getsockname()).start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            c.sendall(b"ping")
            assert c.recv(10) == b"ping"
        proxy.cut()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        proxy.restore()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as c:
            c.sendall(b"back")
            assert c.recv(10) == b"back"
    finally:
        proxy.close()
        stop.set()
        worker.join(5)
        upstream.close()


def test_a_fetch_that_finishes_at_once_does_not_deadlock_the_fetcher(tmp_path: Path) -> None:
    """Found by test_corrupt_drafter_files_end_in_failed: a job that completed before
    `submit` attached its done-callback ran `_forget` on the submitting thread while it held
    the fetcher's lock; every later `submit` (every admin POST) then hung. Deterministic here:
    the executor hands back an already-finished future."""
    import threading
    from concurrent.futures import Future

    from drafter_registry.fetcher import DrafterFetcher, FetchSettings

    class DoneAtOnce:
        def submit(self, *_a: object, **_k: object) -> Future[str | None]:
            future: Future[str | None] = Future()
            future.set_result("failed")
            return future

        def shutdown(self, **_k: object) -> None:
            pass

    fetcher = DrafterFetcher(lambda: None, FetchSettings(cache_dir=tmp_path))  # type: ignore[arg-type]
    fetcher._pool = DoneAtOnce()  # type: ignore[assignment]
    results: list[str | None] = []
    worker = threading.Thread(
        target=lambda: results.extend(fetcher.submit(f"d{i}").result() for i in range(3)),
        daemon=True
    )
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "DrafterFetcher.submit deadlocked"
    assert results == ["failed"] * 3 and fetcher._inflight == {}
