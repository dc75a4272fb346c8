"""Sleeping experts (core/selection/learners.py): a drafter with nothing to propose at a round's
root is asleep; the learner chooses among the awake ones and an asleep expert's regret never
moves."""

from __future__ import annotations

import numpy as np
import pytest

from core.selection.counterfactual import Evidence
from core.selection.feedback import FeedbackQueue
from core.selection.learners import AdaNormalHedge, Hedge, NormalHedge, make_learner

FULL = ("normalhedge", "adanormalhedge", "hedge")


@pytest.mark.parametrize("name", FULL)
def test_an_expert_asleep_in_every_round_never_gains_or_loses(name: str) -> None:
    rng = np.random.default_rng(0)
    learner = make_learner(name, 4)
    awake = np.array([True, True, True, False])
    for _ in range(200):
        losses = rng.random(4)
        learner.update(learner.sleeping_losses(losses, awake))
        assert _regret(learner, 3) == pytest.approx(0.0, abs=1e-9)
    # The awake experts did move: the test would pass vacuously otherwise.
    assert max(abs(_regret(learner, i)) for i in range(3)) > 1.0


def _regret(learner: object, i: int) -> float:
    if isinstance(learner, NormalHedge):
        return float(learner.regrets[i])
    if isinstance(learner, AdaNormalHedge):
        return float(learner._regret[i])
    assert isinstance(learner, Hedge)
    return learner._learner_loss - float(learner._loss[i])


def test_without_the_reduction_an_asleep_expert_would_be_charged() -> None:
    """What the reduction prevents: an asleep drafter's window scores ÂL 1 (no candidate), the
    worst loss; fed as is it drives the drafter's regret down for rounds it never played."""
    learner = NormalHedge(2)
    for _ in range(20):
        learner.update([0.5, 1.0])
    assert learner.regrets[1] < -5.0


def test_an_expert_awake_on_one_domain_wins_there_and_is_never_chosen_asleep() -> None:
    rng = np.random.default_rng(1)
    learner = NormalHedge(3)
    for t in range(400):
        domain_b = t % 2 == 1
        awake = np.array([True, True, domain_b])
        # Expert 2 (say, lookup on copy-heavy requests) is best where it is awake.
        losses = np.array([0.5, 0.6, 0.1]) + rng.normal(0, 0.05, 3)
        learner.update(learner.sleeping_losses(np.clip(losses, 0, 1), awake))
        chosen = learner.select(rng, awake=awake)
        assert awake[chosen]
    assert learner.awake_distribution(np.array([True, True, True]))[2] > 0.9
    off = learner.awake_distribution(np.array([True, True, False]))
    assert off[2] == 0.0 and off.sum() == pytest.approx(1.0)


def test_awake_distribution_falls_back_to_the_prior_when_the_awake_have_no_weight() -> None:
    learner = NormalHedge(3, prior=[0.2, 0.3, 0.5])
    for _ in range(10):
        learner.update([0.0, 1.0, 1.0])  # only expert 0 gains positive regret
    p = learner.awake_distribution(np.array([False, True, True]))
    np.testing.assert_allclose(p, [0.0, 0.375, 0.625])
    with pytest.raises(ValueError):
        learner.awake_distribution(np.zeros(3, dtype=bool))


@pytest.mark.parametrize("name", ["ucbspec", "exp3spec"])
def test_bandits_choose_among_the_awake(name: str) -> None:
    rng = np.random.default_rng(2)
    learner = make_learner(name, 3, max_len=5)
    for _ in range(50):
        awake = np.array([True, False, rng.random() < 0.5])
        arm = learner.select(rng, awake=awake)
        assert awake[arm]
        learner.update_bandit(arm, 2.0, 5)


def test_the_feedback_queue_marks_a_drafter_without_a_candidate_at_the_root_asleep() -> None:
    queue = FeedbackQueue(2, depth=2, estimator="tree", total_tokens=4)
    queue.open_window(0, 0, 2)
    ids = np.array([[[7], [8]], [[-1], [8]]])  # drafter 1: nothing at position 0
    logp = np.where(ids >= 0, 0.0, -np.inf)
    credit = (ids == np.array([7, 8])[None, :, None]).astype(float)
    rank = np.where(ids[..., 0] >= 0, 0, -1)
    queue.add_evidence(0, Evidence(logp, credit, rank))
    [w] = queue.pop_losses()
    np.testing.assert_array_equal(w.awake, [True, False])
    np.testing.assert_allclose(w.loss, [0.0, 1.0 - 1.0 / 3.0])


def test_a_shallow_drafter_is_credited_only_with_its_own_levels() -> None:
    # Both drafters hit at all 4 levels; drafter 1 drafts 2 levels at most.
    queue = FeedbackQueue(2, depth=4, estimator="tree", total_tokens=np.array([8, 2]),
                          depths=[4, 2])
    queue.open_window(0, None, 5)
    hits = np.ones((2, 4))
    queue.add_evidence(0, Evidence.from_gammas(hits))
    [w] = queue.pop_completed()
    np.testing.assert_allclose(w.est_len, [5.0, 3.0])
