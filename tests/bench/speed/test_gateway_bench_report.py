"""The gateway benchmark's one-stream table: the TTFT the gateway adds carries its own sign."""

from __future__ import annotations

from bench.speed.gateway_bench import _one_stream_lines

SUMMARY = {"tps_in_process": 11.2, "tps_gateway": 11.5, "tps_ratio": 0.99,
           "ttft_in_process_ms": 136.6, "ttft_gateway_ms": 142.0,
           "cpu_ms_per_token_in_process": 86.0, "cpu_ms_per_token_gateway": 87.7,
           "cpu_ratio": 0.981}


def test_added_ttft_is_signed_once() -> None:
    faster = "\n".join(_one_stream_lines({**SUMMARY, "ttft_added_ms": -2.4}))
    slower = "\n".join(_one_stream_lines({**SUMMARY, "ttft_added_ms": 3.2}))
    assert "| -2.4 ms | ≤ 10 ms PASS |" in faster
    assert "| +3.2 ms | ≤ 10 ms PASS |" in slower
    assert "+-" not in faster
