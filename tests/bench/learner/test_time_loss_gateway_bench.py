"""The gateway time-loss benchmark's report (bench/learner/time_loss_gateway.py): each server mode's
tokens/s through HTTP (the median burst), the time mode against plain decoding, the acceptance
loss and the better of the two, the time server's plain-round share from its /metrics counters,
each mode's run-to-run noise, and the --quick smoke settings."""

from __future__ import annotations

import pytest

from bench.learner.time_loss_gateway import (
    MODES,
    counter,
    level_repeats,
    level_row,
    parse_args,
    render,
    verdict,
)

META = {"command": "python -m bench.learner.time_loss_gateway", "machine": "m", "date": "d",
        "dtype": "bfloat16", "threads": 2, "max_tokens": 48, "repeats": 2, "warmup": 2,
        "levels": "1,16"}
# Bursts per mode (tokens/s), repeat by repeat (a repeat's modes serve the same prompts), the
# median kept (the slower middle of an even count); the time server's plain and speculative
# rounds over its measured bursts.
ONE = level_row(1, {"plain": [21.0, 20.0, 19.0], "length": [32.0, 36.0, 31.0],
                    "time": [40.0, 42.0, 38.0], "lookup": [30.0] * 3, "suffix": [44.0] * 3,
                    "generalist": [33.0] * 3}, 10, 30)
SIXTEEN = level_row(16, {"plain": [90.0, 99.0, 81.0], "length": [50.0, 45.0, 55.0],
                         "time": [85.5, 90.0, 84.0], "lookup": [70.0] * 3, "suffix": [60.0] * 3,
                         "generalist": [40.0] * 3}, 1400, 136)


def test_rows_keep_the_median_burst_and_the_median_of_paired_ratios() -> None:
    assert ONE["plain_tps"] == 20.0 and SIXTEEN["length_tps"] == 50.0
    assert SIXTEEN["plain_tps"] == 90.0  # not the fastest (99)
    assert level_row(2, {"plain": [1.0, 2.0], "time": [3.0, 4.0]}, 0, 0)["time_tps"] == 3.0
    # each ratio the median over repeats of time's burst over the other's on the same prompts
    assert ONE["time_x_plain_repeats"] == pytest.approx([40 / 21, 42 / 20, 38 / 19])
    assert ONE["time_x_plain"] == pytest.approx(2.0)
    assert ONE["time_x_length"] == pytest.approx(38 / 31)  # not 40 / 32, the medians' ratio
    assert ONE["best_fixed"] == "suffix" and SIXTEEN["best_fixed"] == "lookup"
    assert ONE["time_x_best_fixed"] == pytest.approx(40 / 44)
    assert SIXTEEN["time_x_plain"] == pytest.approx(0.95)
    assert SIXTEEN["time_x_best_fixed"] == pytest.approx(85.5 / 70)
    assert ONE["time_plain_share"] == pytest.approx(0.25)
    assert SIXTEEN["time_plain_share"] == pytest.approx(1400 / 1536)
    assert SIXTEEN["plain_noise"] == pytest.approx(99 / 81 - 1)
    one_burst = level_row(2, {"plain": [1.0], "time": [1.0]}, 0, 0)
    assert one_burst["time_noise"] is None and one_burst["time_plain_share"] is None


def test_a_target_is_met_within_noise_or_missed() -> None:
    assert ONE["time_x_plain_verdict"] == "met"
    assert ONE["time_x_best_fixed_verdict"] == "missed"  # below 1 in every repeat
    assert SIXTEEN["time_x_plain_verdict"] == "within noise"  # 0.95, one repeat 1.04
    assert SIXTEEN["time_x_best_fixed_verdict"] == "met"
    assert verdict([0.8, 0.9, 0.99]) == "missed" and verdict([0.8, 0.9, 1.01]) == "within noise"
    assert verdict([0.8, 1.0, 1.2]) == "met" and verdict([]) == "-"


def test_low_concurrency_runs_more_bursts() -> None:
    assert [level_repeats(n, 3) for n in (1, 2, 4, 8, 16)] == [8, 4, 3, 3, 3]
    assert level_repeats(1, 10) == 10


def test_the_report_gives_each_mode_the_ratios_the_targets_the_plain_share_and_the_noise() -> None:
    text = render([ONE, SIXTEEN], META)
    assert ("| 1 | 20.0 | 40.0 | 32.0 | 30.0 | 44.0 | 33.0 | 2.00 | 0.91 (suffix) "
            "| 25% (10 of 40) |") in text
    assert ("| 16 | 90.0 | 85.5 | 50.0 | 70.0 | 60.0 | 40.0 | 0.95 | 1.22 (lookup) "
            "| 91% (1400 of 1536) |") in text
    assert "- 16 stream(s), x plain decoding: 0.95 [0.95, 0.91, 1.04] within noise" in text
    assert "- 1 stream(s), x the best fixed arm: 0.91 [0.91, 0.95, 0.86] missed" in text
    assert "| 1 | 11% | 11% | 16% | 0% | 0% | 0% |" in text
    assert "median of 2 or more bursts per mode (at least 8 prompts" in text
    assert "2 warm-up bursts on every server" in text


def test_counters_sum_over_labels_and_skip_other_series() -> None:
    text = "\n".join([
        "# TYPE hedgespec_spec_decode_num_drafts_total counter",
        'hedgespec_spec_decode_num_drafts_total{drafter="a",kind="eagle3"} 12.0',
        'hedgespec_spec_decode_num_drafts_total{drafter="lookup",kind="ngram"} 3.0',
        'hedgespec_spec_decode_num_drafts_created{drafter="a",kind="eagle3"} 1.7e9',
        "hedgespec_plain_rounds_total 7.0",
        "hedgespec_plain_rounds_created 1.7e9",
    ])
    assert counter(text, "hedgespec_spec_decode_num_drafts_total") == 15.0
    assert counter(text, "hedgespec_plain_rounds_total") == 7.0
    assert counter(text, "hedgespec_missing_total") == 0.0


def test_quick_is_a_smoke_run_and_the_default_levels_run_one_to_sixteen_every_mode() -> None:
    quick = parse_args(["--quick"])
    assert (quick.levels, quick.max_tokens, quick.repeats, quick.warmup) == ("1,2", 8, 1, 1)
    full = parse_args([])
    assert (full.levels, full.max_tokens, full.repeats) == ("1,2,4,8,16", 48, 3)
    assert full.modes == list(MODES)
    assert parse_args(["--modes", "time,plain"]).modes == ["plain", "time"]
    for bad in ("time,lookup", "time,plain,nope"):
        with pytest.raises(SystemExit):
            parse_args(["--modes", bad])
