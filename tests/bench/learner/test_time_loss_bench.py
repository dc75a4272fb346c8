"""The time-loss benchmark's report (bench/learner/time_loss_report.py): each mode's tokens/s and x
plain per level, the time mode against the best fixed arm (named) and the better of plain and
the acceptance loss, the time mode's share of plain steps, the run-to-run noise per
cell and its median, and the rendered table, noise line and workload name."""

from __future__ import annotations

from typing import Any

import pytest

from bench.learner import time_loss
from bench.learner.time_loss import Mode, measure_level, median_pass
from bench.learner.time_loss_report import Cell, noise, render, rows

# (mode, wall seconds for 96 tokens, noise over two passes or None for one pass)
LEVELS: dict[int, list[tuple[str, float, float | None]]] = {
    1: [("plain", 4.8, 0.02), ("fixed:lookup", 4.0, 0.04), ("fixed:suffix", 3.2, 0.06),
        ("length", 3.0, 0.08), ("time", 2.4, None)],
    8: [("plain", 1.2, 0.01), ("fixed:lookup", 1.6, 0.03), ("fixed:suffix", 2.4, 0.05),
        ("length", 2.0, 0.07), ("time", 1.0, 0.55)],
}
TIME_STEPS = {1: (30, 10), 8: (4, 36)}  # the time mode's (spec_steps, plain_steps)


def cell(mode: str, streams: int, wall_s: float, spread: float | None) -> Cell:
    tps = 96 / wall_s
    passes = (tps,) if spread is None else (tps, tps / (1 + spread))
    spec, plain = TIME_STEPS[streams] if mode == "time" else (20, 0)
    return Cell(mode, streams, tokens=96, wall_s=wall_s, spec_steps=spec, spec_tokens=2 * spec,
                plain_steps=plain, full_tokens=80, full_s=wall_s / 2, passes=passes,
                outputs=((1, 2),))


CELLS = [cell(m, n, w, s) for n, level in LEVELS.items() for m, w, s in level]


def test_rows_give_each_mode_and_the_time_mode_against_the_others() -> None:
    one, eight = rows(CELLS)
    assert one["streams"] == 1 and eight["streams"] == 8
    assert one["time_tps"] == pytest.approx(40.0) and eight["length_tps"] == pytest.approx(48.0)
    assert not any("gate" in key for row in (one, eight) for key in row)
    assert one["fixed:suffix_x_plain"] == pytest.approx(1.5)
    assert eight["length_x_plain"] == pytest.approx(0.6)
    assert one["best_fixed"] == "fixed:suffix" and eight["best_fixed"] == "fixed:lookup"
    assert one["time_x_best_fixed"] == pytest.approx(40 / 30)
    assert eight["time_x_best_fixed"] == pytest.approx(1.6)
    assert one["time_x_max_plain_length"] == pytest.approx(1.25)  # length (32) beats plain
    assert eight["time_x_max_plain_length"] == pytest.approx(1.2)  # plain (80) beats length
    assert one["time_plain_share"] == pytest.approx(0.25)  # 10 of 40 request-steps
    assert eight["time_plain_share"] == pytest.approx(0.9)  # 36 of 40


def test_noise_is_max_over_min_per_cell_and_its_median() -> None:
    got = noise(CELLS)
    assert got["per_cell"]["time@1"] is None  # one pass: no noise, left out of the median
    assert got["per_cell"]["length@8"] == pytest.approx(0.07)
    assert got["per_cell"]["plain@1"] == pytest.approx(0.02)
    # the middle of 9 (0.01 ... 0.08 and 0.55): 0.05, not their mean (0.1)
    assert got["median"] == pytest.approx(0.05)


def test_render_gives_the_main_row_the_noise_median_and_the_workload() -> None:
    meta: dict[str, Any] = {
        "command": "python -m bench.learner.time_loss --workload copy_heavy", "machine": "m",
        "dtype": "bfloat16", "threads": 2, "max_new": 48, "repeats": 2, "seed": 5, "levels": "1,8",
        "tree": [3, 4, 12], "eval_every": 4, "workload": "copy_heavy",
        "workload_text": "code edits", "prompts": 16, "pool_members": "a, lookup, suffix",
        "time_warmup_groups": 2,
        "warmed": {"1": {"time_model": "not fitted yet (loss falls back to 1/ÂL)"},
                   "8": {"time_model": "fitted"}}}
    text = render({"meta": meta, "_cells": CELLS})
    assert "| 8 | 80.0 (1.00x) | 60.0 (0.75x) | 40.0 (0.50x) | 48.0 (0.60x) " \
           "| 96.0 (1.20x) | 1.60 (fixed:lookup) | 1.20 | 90% |" in text
    assert "| 1 | 20.0 (1.00x) | 24.0 (1.20x) | 30.0 (1.50x) | 32.0 (1.60x) " \
           "| 40.0 (2.00x) | 1.33 (fixed:suffix) | 1.25 | 25% |" in text
    assert "| streams | plain | fixed:lookup | fixed:suffix | length | time " \
           "| time x best fixed arm | time x max(plain, length) | time: plain steps |" in text
    assert "median 5.0% over the cells" in text
    assert "after its warm-up: 1 streams: not fitted yet (loss falls back to 1/ÂL); " \
           "8 streams: fitted." in text
    assert "gate" not in text
    assert "in an order drawn afresh (seed 5); each mode keeps the pass of median tokens/s " \
           "of its 2" in text
    assert text.startswith("# Time loss: HedgeSpec minimising time per token, copy_heavy "
                           "workload")


def test_a_mode_keeps_its_median_pass_with_every_pass_listed() -> None:
    slow, fast, middle = (cell("plain", 1, w, None) for w in (9.6, 3.2, 4.8))
    kept = median_pass([slow, fast, middle])
    assert kept.wall_s == pytest.approx(4.8)  # 20 tokens/s: not the fastest (30)
    assert sorted(kept.passes) == pytest.approx([10.0, 20.0, 30.0])
    # an even count keeps the slower middle pass
    assert median_pass([fast, slow]).wall_s == pytest.approx(9.6)


def test_each_repeat_runs_every_mode_once_in_a_fresh_order(monkeypatch: Any) -> None:
    import random

    order: list[str] = []

    def fake_pass(mode: Mode, groups: Any, max_new: int, specs: Any) -> Cell:
        order.append(mode.name)
        return cell("plain", 1, 4.8, None)

    monkeypatch.setattr(time_loss, "one_pass", fake_pass)
    modes = [Mode(f"m{i}", None, "none") for i in range(6)]  # type: ignore[arg-type]
    prompts: Any = ["p"]
    measure_level(modes, prompts, 1, 8, 4, [], random.Random(0), lambda _: None)
    repeats = [order[i:i + 6] for i in range(0, 24, 6)]
    assert all(sorted(r) == [m.name for m in modes] for r in repeats)
    # not one order, nor one order and its reverse by turns
    assert len({tuple(r) for r in repeats}) > 2
