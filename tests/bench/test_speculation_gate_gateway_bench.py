"""The gateway speculation-gate benchmark's report (bench/speculation_gate_gateway.py): each
server mode's tokens/s through HTTP, the ratios against plain decoding, and the gated share."""

from __future__ import annotations


def test_the_gateway_report_gives_each_mode_and_the_gated_share() -> None:
    from bench.speculation_gate_gateway import render as render_gateway

    row = {"streams": 16, "plain_tps": 90.0, "always_tps": 45.0, "auto_tps": 85.5,
           "always_x_plain": 0.5, "auto_x_plain": 0.95, "auto_plain_steps": 1400.0,
           "auto_request_steps_max": 1536}
    text = render_gateway([row], {"machine": "m", "dtype": "bfloat16", "threads": 2,
                                  "max_tokens": 48, "repeats": 2})
    assert "| 16 | 90.0 | 45.0 | 85.5 | 0.50 | 0.95 | 1400 (of 1536) |" in text
    assert "fastest of 2 bursts" in text
