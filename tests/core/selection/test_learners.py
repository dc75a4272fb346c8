"""Online learners (core/selection/learners.py): exact updates, convergence, stability, bandit
feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.selection.counterfactual import simulate_acceptance
from core.selection.learners import (
    EXP3Spec,
    Fixed,
    Hedge,
    Learner,
    NormalHedge,
    UCBSpec,
    make_learner,
    sample_index,
    solve_normalhedge_scale,
)

FULL_INFORMATION = ("normalhedge", "adanormalhedge", "hedge")


def reference_normalhedge(loss_rounds: list[list[float]]) -> list[tuple[list[float], float]]:
    """Textbook NormalHedge on raw regrets: bisection on c, no rescaling, no warm start."""
    n = len(loss_rounds[0])
    regret, p, trace = [0.0] * n, [1.0 / n] * n, []
    for losses in loss_rounds:
        learner = sum(pi * li for pi, li in zip(p, losses, strict=True))
        regret = [r + learner - li for r, li in zip(regret, losses, strict=True)]
        pos = [max(r, 0.0) for r in regret]
        if max(pos) == 0.0:
            p, c = [1.0 / n] * n, 0.0
        else:
            def excess(c: float, pos: list[float] = pos) -> float:
                return sum(math.exp(x * x / (2 * c)) for x in pos) / n - math.e

            lo, hi = 1e-3, 1e3  # regrets here are O(1): no overflow on this range
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
            c = 0.5 * (lo + hi)
            w = [x / c * math.exp(x * x / (2 * c)) for x in pos]
            p = [wi / sum(w) for wi in w]
        trace.append((p, c))
    return trace


def test_normalhedge_matches_a_hand_computed_trace() -> None:
    rounds = [[0.2, 0.5, 0.9], [0.6, 0.1, 0.3], [0.0, 1.0, 0.5], [0.7, 0.2, 0.4]]
    learner = NormalHedge(3)
    for losses, (p_ref, c_ref) in zip(rounds, reference_normalhedge(rounds), strict=True):
        learner.update(np.array(losses))
        np.testing.assert_allclose(learner.distribution(), p_ref, rtol=0, atol=1e-9)
        assert learner.scale == pytest.approx(c_ref, rel=1e-9)


def test_normalhedge_scale_solves_the_potential_equation() -> None:
    rng = np.random.default_rng(0)
    learner = NormalHedge(4)
    for _ in range(300):
        learner.update(rng.random(4))
        pos = np.maximum(learner.regrets, 0.0)
        if pos.max() > 0:
            c = learner.scale
            assert np.mean(np.exp(pos**2 / (2 * c))) == pytest.approx(math.e, rel=1e-10)


@pytest.mark.parametrize("n", [1, 2, 5, 21])
def test_scale_solver_finds_the_root_from_any_start(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(50):
        v = rng.random(n) ** 2
        v[rng.integers(n)] = 1.0
        for guess in (None, 0.01, 1.0, 1.7, 100.0):
            y = solve_normalhedge_scale(v.tolist(), guess)
            assert 1.0 <= y <= 1.0 + math.log(n)
            assert np.log(np.mean(np.exp(v * y))) == pytest.approx(1.0, abs=1e-12)


def test_normalhedge_is_uniform_without_positive_regret() -> None:
    learner = NormalHedge(3)
    np.testing.assert_array_equal(learner.distribution(), np.full(3, 1 / 3))
    learner.update(np.full(3, 0.7))  # equal losses: every regret stays 0
    np.testing.assert_array_equal(learner.distribution(), np.full(3, 1 / 3))
    assert learner.scale == 0.0


def test_normalhedge_gives_no_weight_to_experts_with_negative_regret() -> None:
    learner = NormalHedge(3)
    learner.update(np.array([0.0, 1.0, 0.5]))
    p = learner.distribution()
    assert p[0] == 1.0 and p[1] == 0.0 and p[2] == 0.0  # only expert 0 beat the learner


def test_adanormalhedge_matches_a_hand_computed_trace() -> None:
    rounds = [[0.2, 0.5, 0.9], [0.6, 0.1, 0.3], [0.0, 1.0, 0.5], [0.7, 0.2, 0.4]]
    learner = make_learner("adanormalhedge", 3)
    regret, abs_regret, p = [0.0] * 3, [0.0] * 3, [1 / 3] * 3

    def phi(r: float, c: float) -> float:
        return math.exp(max(r, 0.0) ** 2 / (3 * c))

    for losses in rounds:
        mixed = sum(pi * li for pi, li in zip(p, losses, strict=True))
        regret = [r + mixed - li for r, li in zip(regret, losses, strict=True)]
        abs_regret = [c + abs(mixed - li) for c, li in zip(abs_regret, losses, strict=True)]
        w = [0.5 * (phi(r + 1, c + 1) - phi(r - 1, c + 1))
             for r, c in zip(regret, abs_regret, strict=True)]
        p = [wi / sum(w) for wi in w]
        learner.update(np.array(losses))
        np.testing.assert_allclose(learner.distribution(), p, rtol=0, atol=1e-12)


def bernoulli_stream(rng: np.random.Generator, means: np.ndarray, rounds: int) -> np.ndarray:
    return (rng.random((rounds, means.shape[0])) < means).astype(np.float64)  # [T, N]


@pytest.mark.parametrize("name", FULL_INFORMATION)
def test_full_information_learners_concentrate_on_the_best_expert(name: str) -> None:
    rng = np.random.default_rng(1)
    means = np.array([0.5, 0.4, 0.6, 0.3, 0.45])
    learner = make_learner(name, 5)
    for losses in bernoulli_stream(rng, means, 2000):
        learner.update(losses)
    assert learner.distribution()[3] > 0.9


def two_phase_stream(rng: np.random.Generator, rounds: int) -> np.ndarray:
    """Expert 0 is best for 40% of the stream, then expert 1 (regrets must cross zero)."""
    switch = int(0.4 * rounds)
    first = bernoulli_stream(rng, np.array([0.4, 0.5, 0.6]), switch)
    second = bernoulli_stream(rng, np.array([0.6, 0.3, 0.6]), rounds - switch)
    return np.concatenate([first, second])


def assert_long_run_is_stable(learner: Learner, stream: np.ndarray) -> None:
    for t, losses in enumerate(stream):
        learner.update(losses)
        if t % 1000 == 0:
            p = learner.distribution()
            assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0, abs=1e-12)
    p = learner.distribution()
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p[1] > 0.9


@pytest.mark.slow
def test_normalhedge_stays_exact_over_a_million_updates() -> None:
    learner = NormalHedge(3)
    assert_long_run_is_stable(learner, two_phase_stream(np.random.default_rng(2), 10**6))
    assert learner.regrets.min() < -1e4  # regrets really grew large
    pos = np.maximum(learner.regrets, 0.0)
    ratio = pos / pos.max()  # the scale-free form of the potential equation
    y = pos.max() ** 2 / (2 * learner.scale)
    assert np.log(np.mean(np.exp(ratio**2 * y))) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", ["adanormalhedge", "hedge"])
def test_adanormalhedge_and_hedge_stay_finite_over_long_runs(name: str) -> None:
    # AdaNormalHedge's potential would overflow after a few thousand rounds without log space.
    learner = make_learner(name, 3)
    assert_long_run_is_stable(learner, two_phase_stream(np.random.default_rng(3), 100_000))


def test_hedge_uses_the_anytime_rate() -> None:
    learner = Hedge(2, eta=2.0)
    learner.update(np.array([0.0, 1.0]))
    learner.update(np.array([0.0, 1.0]))
    rate = 2.0 / math.sqrt(3)  # third round
    expected = np.exp(-rate * np.array([0.0, 2.0]))
    np.testing.assert_allclose(learner.distribution(), expected / expected.sum())


@pytest.mark.parametrize("name", FULL_INFORMATION)
def test_full_information_learners_ignore_bandit_feedback(name: str) -> None:
    learner = make_learner(name, 3)
    learner.update(np.array([0.2, 0.5, 0.1]))
    before = learner.distribution()
    learner.update_bandit(0, 1.0, 8)
    np.testing.assert_array_equal(learner.distribution(), before)


def acceptance_stream(rng: np.random.Generator, alphas: list[float], K: int
                      ) -> list[np.ndarray]:
    """Per arm, a long supply of accepted lengths with per-level acceptance alpha."""
    return [simulate_acceptance(np.full(K, a), rng, 5000) for a in alphas]


def play_bandit(learner: Learner, rng: np.random.Generator, rounds: int, K: int) -> np.ndarray:
    supply = acceptance_stream(rng, [0.5, 0.9, 0.7], K)
    pulls = np.zeros(3, dtype=int)
    for _ in range(rounds):
        arm = learner.select(rng)
        learner.update_bandit(arm, float(supply[arm][pulls[arm]]), K + 1)
        pulls[arm] += 1
    return pulls


@pytest.mark.parametrize("name", ["ucbspec", "exp3spec"])
def test_bandit_learners_find_the_best_arm(name: str) -> None:
    rng = np.random.default_rng(4)
    learner = make_learner(name, 3, max_len=8)
    pulls = play_bandit(learner, rng, 3000, K=7)
    assert int(np.argmax(pulls)) == 1 and pulls[1] > 0.6 * 3000
    assert int(np.argmax(learner.distribution())) == 1


def test_ucbspec_plays_every_arm_once_first() -> None:
    learner = UCBSpec(4, max_len=6)
    rng = np.random.default_rng(5)
    played = []
    for _ in range(4):
        arm = learner.select(rng)
        played.append(arm)
        learner.update_bandit(arm, 6.0 if arm == 0 else 1.0, 6)  # arm 0 looks perfect
    assert played == [0, 1, 2, 3]
    assert learner.select(rng) == 0


def test_ucbspec_upper_bound_matches_the_formula() -> None:
    learner = UCBSpec(2, max_len=5, delta=0.1)
    for arm, y in [(0, 3.0), (1, 2.0), (0, 5.0)]:
        learner.update_bandit(arm, y, 5)
    t, L = 3, 4
    expected = []
    for n, mean in [(2, 4.0), (1, 2.0)]:
        log_term = math.log(2 * t * t * math.sqrt(1 + n) / 0.1)
        expected.append(mean + L / 2 * math.sqrt((1 + n) / n**2 * (1 + 2 * log_term)))
    np.testing.assert_allclose(learner.upper_bounds(), expected)


@pytest.mark.parametrize("name", ["ucbspec", "exp3spec"])
def test_bandit_learners_ignore_full_information_losses(name: str) -> None:
    learner = make_learner(name, 3)
    for arm, y in [(0, 2.0), (1, 5.0), (2, 1.0)]:
        learner.update_bandit(arm, y, 8)
    before = learner.distribution()
    choice = learner.select(np.random.default_rng(7))
    learner.update(np.array([1.0, 1.0, 0.0]))  # would favour arm 2 if it were used
    np.testing.assert_array_equal(learner.distribution(), before)
    assert learner.select(np.random.default_rng(7)) == choice


def test_exp3spec_importance_weighting_touches_only_the_played_arm() -> None:
    learner = EXP3Spec(3)
    learner.update_bandit(0, 3.0, 8)
    before = learner.loss_estimates
    p_played = learner.distribution()[2]
    learner.update_bandit(2, 4.0, 8)
    after = learner.loss_estimates
    np.testing.assert_array_equal(after[:2], before[:2])
    assert after[2] - before[2] == pytest.approx((8 - 4.0) / (7 * p_played))


def test_exp3spec_distribution_matches_the_formula() -> None:
    learner = EXP3Spec(3)
    learner.update_bandit(1, 2.0, 8)
    learner.update_bandit(0, 8.0, 8)
    rate = math.sqrt(math.log(3) / (3 * 3))  # third round
    expected = np.exp(-rate * learner.loss_estimates)
    np.testing.assert_allclose(learner.distribution(), expected / expected.sum())


def test_bandit_feedback_outside_the_range_is_rejected() -> None:
    learner = EXP3Spec(2)
    with pytest.raises(ValueError):
        learner.update_bandit(0, 9.0, 8)
    with pytest.raises(ValueError):
        learner.update_bandit(0, 0.0, 8)
    with pytest.raises(IndexError):
        learner.update_bandit(2, 1.0, 8)


def test_sample_index_follows_the_distribution_and_skips_zero_mass() -> None:
    rng = np.random.default_rng(8)
    p = np.array([0.2, 0.0, 0.5, 0.3, 0.0])
    counts = np.bincount([sample_index(p, rng) for _ in range(20_000)], minlength=5)
    assert counts[1] == 0 and counts[4] == 0
    np.testing.assert_allclose(counts / 20_000, p, atol=0.015)


def test_normalhedge_pool_changes_keep_the_other_experts_regrets() -> None:
    learner = NormalHedge(3)
    learner.update(np.array([0.1, 0.6, 0.3]))
    learner.add_expert()
    assert learner.num_experts == 4 and learner.regrets[3] == 0.0
    regrets = learner.regrets
    learner.remove_expert(1)
    np.testing.assert_array_equal(learner.regrets, regrets[[0, 2, 3]])
    assert learner.distribution().sum() == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["adanormalhedge", "hedge", "exp3spec"])
def test_pool_changes_keep_a_valid_distribution(name: str) -> None:
    learner = make_learner(name, 3)
    rng = np.random.default_rng(11)
    for _ in range(50):  # expert 0 is best under either kind of feedback
        learner.update(np.array([0.0, 1.0, 1.0]))
        arm = learner.select(rng)
        learner.update_bandit(arm, 8.0 if arm == 0 else 2.0, 8)
    learner.add_expert()
    p = learner.distribution()
    assert p.shape == (4,) and p.sum() == pytest.approx(1.0)
    assert 0.0 < p[3] < p[0]  # a newcomer neither dominates nor starves
    learner.remove_expert(0)
    assert learner.distribution().shape == (3,)


def test_a_new_ucb_arm_is_tried_next() -> None:
    learner = UCBSpec(2)
    for arm in (0, 1):
        learner.update_bandit(arm, 3.0, 8)
    learner.add_expert()
    assert learner.select(np.random.default_rng(0)) == 2
    learner.remove_expert(0)
    assert learner.pulls.tolist() == [1.0, 0.0]


def test_fixed_always_plays_its_expert_and_follows_pool_changes() -> None:
    learner = make_learner("fixed", 4, fixed_index=2)
    rng = np.random.default_rng(10)
    learner.update(np.array([0.0, 0.0, 1.0, 0.0]))
    assert {learner.select(rng) for _ in range(20)} == {2}
    learner.remove_expert(0)
    assert isinstance(learner, Fixed) and learner.index == 1
    np.testing.assert_array_equal(learner.distribution(), [0.0, 1.0, 0.0])
    with pytest.raises(ValueError):
        learner.remove_expert(1)


def test_make_learner_builds_every_kind_and_rejects_unknown_names() -> None:
    kinds = {name: make_learner(name, 2, fixed_index=0).full_information
             for name in ("normalhedge", "adanormalhedge", "hedge", "ucbspec", "exp3spec",
                          "fixed")}
    assert kinds == {"normalhedge": True, "adanormalhedge": True, "hedge": True,
                     "ucbspec": False, "exp3spec": False, "fixed": True}
    with pytest.raises(ValueError):
        make_learner("exp4", 2)
    with pytest.raises(ValueError):
        make_learner("fixed", 2)
    with pytest.raises(ValueError):
        make_learner("normalhedge", 0)
    with pytest.raises(ValueError):
        NormalHedge(1).remove_expert(0)


@pytest.mark.parametrize("bad", [[0.5, 1.5], [-0.5, 0.5], [math.nan, 0.5], [0.5]])
def test_invalid_loss_vectors_are_rejected(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        NormalHedge(2).update(np.array(bad))


def reference_prior_normalhedge(loss_rounds: list[list[float]],
                                prior: list[float]) -> list[list[float]]:
    """NormalHedge with a prior on raw regrets: Σ π_i exp([R_i]_+²/2c) = e by bisection,
    p_i ∝ π_i [R_i]_+ exp([R_i]_+²/2c), p = π without positive regret."""
    n = len(prior)
    regret, p, trace = [0.0] * n, list(prior), []
    for losses in loss_rounds:
        learner = sum(pi * li for pi, li in zip(p, losses, strict=True))
        regret = [r + learner - li for r, li in zip(regret, losses, strict=True)]
        pos = [max(r, 0.0) for r in regret]
        if max(pos) == 0.0:
            p = list(prior)
        else:
            def excess(c: float, pos: list[float] = pos) -> float:
                return sum(w * math.exp(x * x / (2 * c))
                           for w, x in zip(prior, pos, strict=True)) - math.e

            lo, hi = 1e-3, 1e3
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
            c = 0.5 * (lo + hi)
            w = [pi * x / c * math.exp(x * x / (2 * c)) for pi, x in zip(prior, pos, strict=True)]
            p = [wi / sum(w) for wi in w]
        trace.append(p)
    return trace


def test_normalhedge_with_a_prior_matches_the_reference_and_starts_at_the_prior() -> None:
    rounds = [[0.2, 0.5, 0.9], [0.6, 0.1, 0.3], [0.0, 1.0, 0.5], [0.7, 0.2, 0.4],
              [0.5, 0.5, 0.1]]
    prior = [0.1, 0.3, 0.6]
    learner = NormalHedge(3, prior=[1.0, 3.0, 6.0])  # normalised on the way in
    np.testing.assert_allclose(learner.distribution(), prior, rtol=0, atol=1e-15)
    learner.update(np.full(3, 0.4))  # equal losses: no positive regret, the prior still rules
    np.testing.assert_allclose(learner.distribution(), prior, rtol=0, atol=1e-15)
    for losses, p_ref in zip(rounds, reference_prior_normalhedge(rounds, prior), strict=True):
        learner.update(np.array(losses))
        np.testing.assert_allclose(learner.distribution(), p_ref, rtol=0, atol=1e-9)
    uniform = NormalHedge(3, prior=[1.0, 1.0, 1.0])
    plain = NormalHedge(3)
    for losses in rounds:
        uniform.update(np.array(losses))
        plain.update(np.array(losses))
        np.testing.assert_allclose(uniform.distribution(), plain.distribution(), atol=1e-12)


@pytest.mark.parametrize("n", [2, 5, 21])
def test_scale_solver_with_a_prior_finds_the_root(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(50):
        v = rng.random(n) ** 2
        top = int(rng.integers(n))
        v[top] = 1.0
        prior = rng.random(n) + 1e-3
        prior /= prior.sum()
        for guess in (None, 0.01, 1.0, 3.0, 100.0):
            y = solve_normalhedge_scale(v.tolist(), guess, prior=prior.tolist())
            assert 1.0 <= y <= 1.0 - math.log(prior[top]) + 1e-12
            assert np.log(np.sum(prior * np.exp(v * y))) == pytest.approx(1.0, abs=1e-12)


def test_a_right_prior_saves_loss_and_a_wrong_one_still_converges() -> None:
    """Expert 2 is best. A prior on it plays it from the first round; a prior on expert 0
    (2/3 of the mass) is overcome and the learner still concentrates on expert 2."""
    rng = np.random.default_rng(5)
    rounds = [np.clip(np.array([0.6, 0.5, 0.3]) + rng.normal(0, 0.1, 3), 0, 1)
              for _ in range(300)]

    def run(prior: list[float] | None) -> tuple[float, float]:
        learner = NormalHedge(3, prior=prior)
        total = 0.0
        for losses in rounds:
            total += float(learner.distribution() @ losses)
            learner.update(losses)
        return total, float(learner.distribution()[2])

    uniform, right, wrong = run(None), run([0.2, 0.2, 0.6]), run([4.0, 1.0, 1.0])
    assert right[0] < uniform[0] < wrong[0]
    best = float(sum(r[2] for r in rounds))
    assert wrong[0] - best < 0.05 * len(rounds)  # no regret despite the wrong prior
    assert wrong[1] > 0.9 and right[1] > 0.9


def test_a_prior_follows_pool_changes_and_bad_priors_are_refused() -> None:
    learner = NormalHedge(3, prior=[0.5, 0.25, 0.25])
    learner.permute([2, 0, 1])
    np.testing.assert_allclose(learner.prior, [0.25, 0.5, 0.25])
    np.testing.assert_allclose(learner.distribution(), [0.25, 0.5, 0.25])
    learner.add_expert()  # the newcomer gets the mean prior, the others shrink in proportion
    np.testing.assert_allclose(learner.prior, [0.1875, 0.375, 0.1875, 0.25])
    learner.remove_expert(1)
    np.testing.assert_allclose(learner.prior, [0.3, 0.3, 0.4])
    assert learner.distribution().sum() == pytest.approx(1.0)
    for bad in ([1.0, 0.0], [1.0, -1.0], [1.0, float("nan")], [1.0, 1.0, 1.0]):
        with pytest.raises(ValueError):
            NormalHedge(2, prior=bad)
    with pytest.raises(ValueError, match="takes no prior"):
        make_learner("hedge", 2, prior=[0.5, 0.5])
