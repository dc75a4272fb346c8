"""The speculation gate benchmark's report: each mode's tokens/s per level, the ratios against
plain decoding and against the better of plain and drafting, MAT over speculative steps, the
share of plain steps under the gate, and whether the gate changed a token."""

from __future__ import annotations

import pytest

from bench.speculation_gate_report import Cell, render, rows

META = {"machine": "m", "dtype": "bfloat16", "threads": 2, "max_new": 48, "repeats": 2,
        "tree": (3, 4, 12), "eval_every": 4,
        "choices": {"1": "speculative (speculative 22.0, plain 20.0)",
                    "8": "plain (speculative 40.0, plain 80.0)"}}


def cell(mode: str, streams: int, wall_s: float, spec: tuple[int, int] = (0, 0), plain: int = 0,
         outputs: tuple[tuple[int, ...], ...] = ((1, 2),)) -> Cell:
    return Cell(mode, streams, tokens=96, wall_s=wall_s, spec_steps=spec[0],
                spec_tokens=spec[1], plain_steps=plain, full_tokens=80, full_s=wall_s / 2,
                outputs=outputs)


def level(streams: int, plain_s: float, always_s: float, auto_s: float,
          auto_plain: int, auto_outputs: tuple[tuple[int, ...], ...] = ((1, 2),)) -> list[Cell]:
    return [cell("plain", streams, plain_s), cell("always", streams, always_s, (40, 80)),
            cell("auto", streams, auto_s, (40 - auto_plain, 80 - 2 * auto_plain), auto_plain,
                 auto_outputs)]


def test_rows_give_both_ratios_mat_and_the_plain_share() -> None:
    cells = level(1, 4.8, 4.0, 4.0, 0) + level(8, 1.2, 2.4, 1.25, 36)
    one, eight = rows(cells)
    assert one["always_x_plain"] == pytest.approx(1.2) and one["auto_x_best"] == 1.0
    assert one["always_mat"] == 2.0 and one["auto_plain_share"] == 0.0
    assert eight["auto_x_plain"] == pytest.approx(0.96) and eight["auto_x_best"] == 0.96
    assert eight["auto_plain_share"] == pytest.approx(0.9)  # 36 of 40 request-steps
    text = render(cells, META)
    assert "| 8 | 80.0 | 40.0 | 76.8 | 0.50 | 0.96 | 0.96 | 2.00 | 90% | plain (speculative " \
           "40.0, plain 80.0) |" in text
    assert "fastest of 2 passes" in text and "yes, at every level" in text
    assert eight["plain_full_tps"] == pytest.approx(80 / 0.6)  # full-width steps only
    assert "| 8 | 133.3 | 66.7 | 128.0 | 0.50 | 0.96 |" in text


def test_a_changed_token_is_reported_with_its_cause() -> None:
    cells = level(1, 4.8, 4.0, 4.0, 0, auto_outputs=((1, 3),))
    text = render(cells, META)
    assert "not at every level" in text and "bfloat16" in text


def test_the_gateway_report_gives_each_mode_and_the_gated_share() -> None:
    from bench.speculation_gate_gateway import render as render_gateway

    row = {"streams": 16, "plain_tps": 90.0, "always_tps": 45.0, "auto_tps": 85.5,
           "always_x_plain": 0.5, "auto_x_plain": 0.95, "auto_plain_steps": 1400.0,
           "auto_request_steps_max": 1536}
    text = render_gateway([row], {"machine": "m", "dtype": "bfloat16", "threads": 2,
                                  "max_tokens": 48, "repeats": 2})
    assert "| 16 | 90.0 | 45.0 | 85.5 | 0.50 | 0.95 | 1400 (of 1536) |" in text
    assert "fastest of 2 bursts" in text
