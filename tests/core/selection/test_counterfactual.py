"""γ, the acceptance-length estimator and the losses (core/selection/counterfactual.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.selection.counterfactual import (
    estimate_length,
    gamma_greedy,
    gamma_sampling,
    length_loss,
    prob_loss,
    simulate_acceptance,
)


def test_gamma_greedy_is_the_argmax_membership_indicator() -> None:
    rng = np.random.default_rng(0)
    N, M, k, V = 4, 9, 3, 6  # small V so that hits and misses both occur
    argmax = rng.integers(0, V, size=M)
    topk = rng.integers(0, V, size=(N, M, k))
    gammas = gamma_greedy(argmax, topk)
    assert gammas.shape == (N, M) and gammas.dtype == np.float64
    for d in range(N):
        for m in range(M):
            assert gammas[d, m] == (1.0 if argmax[m] in set(topk[d, m].tolist()) else 0.0)
    assert 0.0 < gammas.mean() < 1.0


def test_gamma_greedy_hand_case() -> None:
    argmax = np.array([5, 2])
    topk = np.array([[[5, 1], [0, 1]], [[3, 4], [2, 2]]])
    np.testing.assert_array_equal(gamma_greedy(argmax, topk), [[1.0, 0.0], [0.0, 1.0]])


def test_gamma_sampling_equals_hand_sum_over_distinct_candidates() -> None:
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.25, 0.125, 0.125]])
    # drafter 1 proposes id 3 twice at position 0: it must be counted once
    topk = np.array([[[0, 1], [2, 3]], [[3, 3], [0, 2]]])
    expected = [[0.1 + 0.2, 0.125 + 0.125], [0.4, 0.5 + 0.125]]
    np.testing.assert_allclose(gamma_sampling(probs, topk), expected, rtol=0, atol=1e-15)


def test_gamma_sampling_matches_loop_on_random_input() -> None:
    rng = np.random.default_rng(1)
    N, M, k, V = 3, 5, 4, 7
    probs = rng.dirichlet(np.ones(V), size=M)
    topk = rng.integers(0, V, size=(N, M, k))
    got = gamma_sampling(probs, topk)
    for d in range(N):
        for m in range(M):
            assert got[d, m] == pytest.approx(sum(probs[m, c] for c in set(topk[d, m].tolist())))


def test_gamma_sampling_of_the_whole_vocabulary_is_one() -> None:
    probs = np.full((1, 3), 1.0 / 3.0)
    topk = np.array([[[0, 1, 2]]])
    assert gamma_sampling(probs, topk)[0, 0] <= 1.0
    assert gamma_sampling(probs, topk)[0, 0] == pytest.approx(1.0)


@pytest.mark.parametrize("bad", [np.array([[[0, 4]]]), np.array([[[-1, 0]]])])
def test_gamma_sampling_rejects_ids_outside_the_vocabulary(bad: np.ndarray) -> None:
    with pytest.raises(ValueError):
        gamma_sampling(np.full((1, 4), 0.25), bad)


def test_gamma_shapes_are_checked() -> None:
    with pytest.raises(ValueError):
        gamma_greedy(np.array([1, 2]), np.zeros((2, 3, 1), dtype=int))
    with pytest.raises(ValueError):
        gamma_sampling(np.full((2, 4), 0.25), np.zeros((2, 3, 1), dtype=int))


def test_estimate_length_hand_case() -> None:
    # 1 + 0.5 + 0.5*0.4 + 0.5*0.4*1.0
    assert estimate_length(np.array([[0.5, 0.4, 1.0]]))[0] == pytest.approx(1.9)
    np.testing.assert_allclose(estimate_length(np.array([[1.0] * 4, [0.0] * 4, [1, 0, 1, 1]])),
                               [5.0, 1.0, 2.0])


def test_estimate_length_equals_theorem_3_form() -> None:
    """ÂL = Σ_{k=1}^{K+1} k (1 - γ_k) Π_{j<k} γ_j with γ_{K+1} = 0 (the paper's form)."""
    rng = np.random.default_rng(2)
    gammas = rng.random((6, 5))
    for row, est in zip(gammas, estimate_length(gammas), strict=True):
        g = [*row.tolist(), 0.0]
        paper = sum((k + 1) * (1 - g[k]) * math.prod(g[:k]) for k in range(len(g)))
        assert est == pytest.approx(paper, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_estimate_length_equals_monte_carlo_mean(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    K = int(rng.integers(1, 8))
    gammas = rng.uniform(0.3, 1.0, size=K)
    n = 200_000
    draws = simulate_acceptance(gammas, rng, n)
    assert draws.min() >= 1 and draws.max() <= K + 1
    stderr = draws.std() / math.sqrt(n)
    assert abs(draws.mean() - estimate_length(gammas)) < 5 * stderr + 1e-12


def test_monte_carlo_of_degenerate_gammas_is_exact() -> None:
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(simulate_acceptance(np.array([1.0, 1.0, 0.0, 1.0]), rng, 50), 3)
    np.testing.assert_array_equal(simulate_acceptance(np.array([0.0, 1.0]), rng, 50), 1)


def test_estimate_length_lies_in_1_to_K_plus_1() -> None:
    rng = np.random.default_rng(4)
    est = estimate_length(rng.random((200, 6)))
    assert est.min() >= 1.0 and est.max() <= 7.0


@pytest.mark.parametrize("bad", [[0.5, 1.5], [-0.1, 0.5], [0.5, math.nan]])
def test_estimate_length_rejects_invalid_probabilities(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        estimate_length(np.array([bad]))


def test_losses_map_into_the_unit_interval() -> None:
    K = 4
    np.testing.assert_allclose(length_loss(np.array([1.0, 3.0, 5.0]), K), [0.8, 0.4, 0.0])
    rng = np.random.default_rng(5)
    losses = length_loss(estimate_length(rng.random((100, K))), K)
    assert losses.min() >= 0.0 and losses.max() <= 1.0 - 1.0 / (K + 1) + 1e-12
    np.testing.assert_allclose(prob_loss(np.array([0.0, 0.25, 1.0])), [1.0, 0.75, 0.0])
    with pytest.raises(ValueError):
        length_loss(np.array([1.0]), 0)
