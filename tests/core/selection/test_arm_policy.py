"""A request's arm policy (core/selection/arm_policy.py) decides from arrays alone: which arm
a round drafts with, the step check's view of a row, whether its EAGLE-3 drafters or its whole
pool sleep or wake, and where it may start. No engine, no pool: members as kinds, rows and
depths."""

from __future__ import annotations

import numpy as np
import pytest

from core.selection.arm_costs import FREE, NEURAL, PLAIN, Start, StepCosts, StepSample
from core.selection.arm_policy import PROBE_LENGTH, PROBE_ROUNDS, ArmPolicy, Members
from core.selection.feedback import WindowLoss
from core.selection.learners import make_learner

MEMBERS = Members(ids=("coder", "medic", "lookup"), kinds=(NEURAL, NEURAL, FREE),
                  rows=(13.0, 13.0, 9.0), depths=(4, 4, 8), round_max=9)


def policy(plain_arm: bool = True, costs: StepCosts | None = None) -> ArmPolicy:
    learner = make_learner("normalhedge", len(MEMBERS) + plain_arm, max_len=MEMBERS.round_max)
    return ArmPolicy(learner, MEMBERS, plain_arm=plain_arm, costs=costs or StepCosts())


def favour(p: ArmPolicy, arm: int, windows: int = 40) -> None:
    """Windows where `arm` loses nothing and every other arm all it can."""
    losses = np.ones(p.learner.num_experts)
    losses[arm] = 0.0
    for _ in range(windows):
        p.learner.update(losses)


def test_members_are_told_apart_by_kind() -> None:
    assert MEMBERS.neural == [0, 1] and MEMBERS.free == [2] and len(MEMBERS) == 3


def test_a_round_draws_among_the_awake_members_or_decodes_plain() -> None:
    rng = np.random.default_rng(0)
    p = policy()
    favour(p, 1)
    assert p.choose(rng, None) == 1
    assert p.choose(rng, np.array([True, False, True])) in (0, 2)  # the favourite asleep
    assert p.choose(rng, np.zeros(3, dtype=bool)) is None  # only plain decoding awake
    favour(p, 3, windows=200)  # plain decoding, the last arm
    assert p.choose(rng, None) is None
    p.fall_asleep(pool=True)
    assert p.choose(rng, None) is None and p.pool_asleep


def test_without_the_plain_arm_an_all_asleep_round_is_plain_and_nothing_sleeps() -> None:
    p = policy(plain_arm=False)
    assert p.choose(np.random.default_rng(0), np.zeros(3, dtype=bool)) is None
    p.awake_rounds = 10 * PROBE_LENGTH
    assert not p.should_sleep(drafters_fed=True) and not p.pool_should_sleep(False)
    w = WindowLoss(np.full(3, 0.5), np.ones(3, dtype=bool), np.full(3, 2.0))
    assert p.arm_losses(w) is w  # the queue's losses, no plain arm appended


def test_the_drafters_sleep_once_plain_decoding_has_their_weight_and_not_before() -> None:
    p = policy()
    favour(p, 3)  # plain decoding
    p.awake_rounds = PROBE_LENGTH - 1
    assert not p.should_sleep(drafters_fed=True)  # too early: exploration's noise
    p.awake_rounds = PROBE_LENGTH
    assert p.should_sleep(drafters_fed=True)
    assert not p.should_sleep(drafters_fed=False)  # already asleep, or not fed in full
    assert p.pool_should_sleep(drafters_asleep=True)  # the lookup loses to plain too
    fresh = policy()
    favour(fresh, 2)  # the lookup pays: the pool stays awake, the drafters may sleep
    fresh.awake_rounds = PROBE_LENGTH
    assert not fresh.pool_should_sleep(drafters_asleep=True)


def test_rounds_count_asleep_or_awake() -> None:
    p = policy()
    p.count_round(drafters_asleep=False)
    p.count_round(drafters_asleep=True)  # the pool awake, the EAGLE-3 drafters not
    assert (p.awake_rounds, p.asleep_rounds) == (2, 1)
    p.fall_asleep(pool=True)
    p.count_round(drafters_asleep=True)
    assert (p.awake_rounds, p.asleep_rounds) == (2, 1)  # the sleep's own count restarted


def test_a_sleep_lasts_until_its_probe_and_waits_for_deferred_rounds() -> None:
    p = policy()
    p.fall_asleep(pool=True)
    p.asleep_rounds = PROBE_ROUNDS - 1
    assert not p.wake_due(drafters_asleep=True, deferred=False)
    p.asleep_rounds = PROBE_ROUNDS
    assert not p.wake_due(drafters_asleep=True, deferred=True)
    assert p.wake_due(drafters_asleep=True, deferred=False)
    p.wake()
    assert not p.pool_asleep and p.asleep_rounds == p.awake_rounds == 0


def costs_where_rows_are_dear() -> StepCosts:
    """One stream where each tree row costs as much as a plain round."""
    costs = StepCosts()
    for rows in (1, 13, 1, 13):
        costs.record(StepSample(requests=1, rows=rows, verify_s=0.01 * rows,
                                neural_rows=int(rows > 1), neural_s=0.005 * (rows > 1)))
    return costs


def test_dominated_drafters_start_asleep_and_are_not_woken() -> None:
    p = policy(costs=costs_where_rows_are_dear())
    assert p.drafters_dominated()  # 13 rows at 10 ms each: more than 5 plain rounds
    assert p.start_levels() == [Start.MODEL_FREE, Start.ASLEEP]
    p.fall_asleep(pool=False)
    p.asleep_rounds = PROBE_ROUNDS
    assert not p.wake_due(drafters_asleep=True, deferred=False)
    assert policy().start_levels() == [Start.AWAKE, Start.MODEL_FREE, Start.ASLEEP]


def test_the_step_check_sees_each_arms_own_rows_and_its_running_acceptance() -> None:
    p = policy()
    assert p.planned(None).kind == PLAIN and p.planned(None).rows == 1.0
    assert p.planned(0).expected is None  # no window yet
    p.track(WindowLoss(np.zeros(3), np.array([True, False, True]), np.array([3.0, 9.0, 2.0])))
    p.track(WindowLoss(np.zeros(3), np.ones(3, dtype=bool), np.array([1.0, 5.0, 2.0])))
    assert p.planned(0).expected == pytest.approx(3.0 + 0.1 * (1.0 - 3.0))
    assert p.planned(1).expected == pytest.approx(5.0)  # its first awake window
    assert p.planned(0).rows == 13.0 and p.planned(0).kind == NEURAL
    p.costs.record_drafted("lookup", 4)
    assert p.planned(2).rows == 5.0 and p.planned(2).kind == FREE  # the mean drafted + root
