"""The arm policy sweep's configurations and report (bench/learner/arm_policy_sweep.py): one
constant moved at a time from the defaults, set only while its engine runs, each value judged
against the defaults pass by pass."""

from __future__ import annotations

import pytest

import core.selection.arm_policy as arm_policy
from bench.learner.arm_policy_sweep import (
    Config,
    applied,
    configs,
    level_rows,
    parse_args,
    parse_sweep,
    render,
    verdict,
)

META = {"command": "python -m bench.learner.arm_policy_sweep", "machine": "m", "date": "d",
        "dtype": "torch.bfloat16", "threads": 2, "prompts": 12, "max_new": 48, "passes": 2}


def test_a_sweep_names_a_constant_of_the_arm_policy() -> None:
    assert parse_sweep("PROBE_ROUNDS=16,32") == ("PROBE_ROUNDS", [16.0, 32.0])
    for bad in ("NOT_A_CONSTANT=1", "PROBE_ROUNDS", "PROBE_ROUNDS="):
        with pytest.raises(ValueError):
            parse_sweep(bad)


def test_configurations_move_one_constant_at_a_time_and_skip_its_default() -> None:
    default = float(arm_policy.PROBE_ROUNDS)
    got = configs([("PROBE_ROUNDS", [16.0, default]), ("SLEEP_SHARE", [0.2])])
    assert [c.name for c in got] == ["defaults", "defaults (control)", "PROBE_ROUNDS=16",
                                     "SLEEP_SHARE=0.2"]


def test_a_value_is_set_only_while_its_configuration_runs() -> None:
    before = arm_policy.PROBE_ROUNDS
    with applied(Config("PROBE_ROUNDS", 16.0)):
        assert arm_policy.PROBE_ROUNDS == 16 and isinstance(arm_policy.PROBE_ROUNDS, int)
    assert before == arm_policy.PROBE_ROUNDS
    with pytest.raises(RuntimeError), applied(Config("SLEEP_SHARE", 0.5)):
        raise RuntimeError
    assert arm_policy.SLEEP_SHARE == 0.05  # restored on the way out of a failure


def test_values_are_judged_against_the_defaults_pass_by_pass() -> None:
    rows = level_rows(1, {"defaults": [30.0, 40.0], "PROBE_ROUNDS=16": [33.0, 44.0],
                          "SLEEP_SHARE=0.2": [27.0, 48.0], "PROBE_LENGTH=8": [20.0, 36.0]})
    by = {r["config"]: r for r in rows}
    assert by["PROBE_ROUNDS=16"]["ratios"] == pytest.approx([1.1, 1.1])
    assert by["PROBE_ROUNDS=16"]["verdict"] == "wins"
    assert by["SLEEP_SHARE=0.2"]["verdict"] == "within noise"  # 0.9 then 1.2
    assert by["PROBE_LENGTH=8"]["verdict"] == "loses"
    assert by["defaults"]["verdict"] == "-" and by["defaults"]["median"] == 35.0
    assert verdict([]) == "-" and verdict([1.2, 0.99, 1.3]) == "within noise"
    # beyond 1 is not enough: a value must beat the control (the defaults on another engine)
    assert verdict([1.05, 1.06], control=[1.08, 0.97]) == "within noise"
    assert verdict([0.95, 0.96], control=[1.02, 0.955]) == "within noise"
    assert verdict([0.95, 0.96], control=[1.02, 0.98]) == "loses"
    control = level_rows(1, {"defaults": [30.0, 40.0], "defaults (control)": [33.0, 38.0],
                             "X=1": [32.0, 44.0]})
    assert [r["verdict"] for r in control] == ["-", "-", "within noise"]
    text = render(rows, META)
    assert "| 1 | PROBE_ROUNDS=16 | 33.0, 44.0 | 38.5 | 1.10 (1.10, 1.10) | wins |" in text


def test_quick_is_a_smoke_run_and_the_default_sweeps_the_three_sleep_constants() -> None:
    quick = parse_args(["--quick"])
    assert (quick.levels, quick.prompts, quick.max_new, quick.passes) == ("1", 2, 8, 1)
    full = parse_args([])
    assert [parse_sweep(s)[0] for s in full.sweep] == ["PROBE_ROUNDS", "PROBE_LENGTH",
                                                       "SLEEP_SHARE"]
