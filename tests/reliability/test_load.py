"""Load, overload and disconnect storms against a real server (bench/reliability/scenarios.py
at CI size; `python -m bench.reliability.reliability_bench` runs them bigger and writes the report).

One server: 2 running slots and 14 waiting places (capacity 16).
- Below capacity (6 closed-loop streaming clients, so some always wait): every request ends in a
  complete stream, nothing is refused.
- Above it (24 clients): the excess gets clean 429s (OpenAI error body, `Retry-After`, code
  `overloaded`) and nothing else: no 5xx, no cut stream, no transport error.
- Disconnect storms (clients dropping before the headers, after them, mid-stream with FIN or
  RST, during non-streaming generation, and admin live streams): afterwards nothing is in
  flight, running or waiting, no request trace or admin stream is left, and threads, file
  descriptors and memory stay at their warmed-up level.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness.server import ServerProcess
from bench.reliability import scenarios as R
from tests.reliability.judge import assert_clean_log, assert_storm_left_nothing

pytestmark = pytest.mark.timeout(300)
RSS_BOUND = 64 * 2**20  # growth allowed over a whole module's load (stated in the report too)


@pytest.fixture(scope="module")
def server(pool_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = R.start_server(pool_file, tmp_path_factory.mktemp("load"), *R.KEY_FLAGS,
                          "--max-running", "2", "--max-queue", "14", "--request-timeout", "60")
    proc.rss_start = R.proc_status(proc.proc.pid)["rss_bytes"]  # type: ignore[attr-defined]
    yield proc
    proc.stop()
    assert_clean_log(proc.log())


def _explain(summary: dict[str, Any]) -> str:
    return f"{summary['kinds']}, samples: {summary['failure_samples']}"


def test_below_capacity_every_request_succeeds(server: ServerProcess) -> None:
    summary = R.load_test(server.base_url, clients=6, duration_s=4)
    assert summary["requests"] >= 6 and summary["ok"] == summary["requests"], _explain(summary)
    assert summary["rejected_429"] == 0 and summary["errors"] == 0
    assert summary["latency_p50_s"] <= summary["latency_p99_s"]
    assert summary["ttft_p50_s"] is not None and summary["tokens_per_s"] > 0
    assert summary["completion_tokens"] == 16 * summary["ok"]  # ignore_eos: exactly max_tokens
    R.wait_idle(server.base_url)


def test_above_capacity_the_excess_gets_clean_429s(server: ServerProcess) -> None:
    summary = R.load_test(server.base_url, clients=24, duration_s=3)
    assert summary["rejected_429"] > 0, _explain(summary)
    assert summary["rejected_codes"] == {"overloaded": summary["rejected_429"]}
    assert summary["errors"] == 0 and summary["status_5xx"] == 0 and summary["lost"] == 0, (
        _explain(summary)
    )
    assert summary["ok"] >= 2  # the admitted ones still complete
    R.wait_idle(server.base_url)
    counters = R.server_counters(server.base_url)
    assert counters["rejected_overloaded"] >= summary["rejected_429"]


def test_disconnect_storms_leave_nothing_behind(server: ServerProcess) -> None:
    storm = R.disconnect_storm(server.base_url, server.proc.pid, clients=12, waves=2, rounds=2)
    assert storm["dropped_total"] == 48
    assert_storm_left_nothing(storm)
    # The server aborted the dropped generations rather than finishing them for nobody.
    assert R.server_counters(server.base_url)["aborted"] > 0


def test_the_server_still_serves_and_memory_is_bounded(server: ServerProcess) -> None:
    summary = R.load_test(server.base_url, clients=2, duration_s=1.5)
    assert summary["errors"] == 0 and summary["ok"] >= 1
    R.wait_idle(server.base_url)
    rss = R.proc_status(server.proc.pid)["rss_bytes"]
    assert rss - server.rss_start < RSS_BOUND, (server.rss_start, rss)  # type: ignore[attr-defined]


def test_frames_survive_clients_that_split_lines_like_python() -> None:
    """Found by the soak run: generated text with U+2028 (or U+0085, U+2029) went out raw inside
    the JSON of a `data:` line, and httpx's iter_lines (str.splitlines semantics) cut the line
    there. The gateway escapes them; the bench's own SSE reader splits on LF only."""
    import json

    from gateway.openai.framing import sse_frame

    text = "a\u2028b\x85c\u2029d é"
    frame = sse_frame({"choices": [{"delta": {"content": text}}]})
    lines = frame.decode("utf-8").splitlines()
    assert len(lines) == 2 and lines[1] == ""
    assert json.loads(lines[0].removeprefix("data: "))["choices"][0]["delta"]["content"] == text
    assert [ln for ln in R.sse_lines(iter([frame[:9], frame[9:]])) if ln] == [lines[0]]
    assert [ln for ln in R.sse_lines(iter([b'data: {"t":"\xe2\x80', b'\xa8"}\n\n'])) if ln] == [
        'data: {"t":"\u2028"}'
    ]
