"""Counterfactual evaluation of every drafter on the verified trajectory (DESIGN.md §3, 5-6).

Symbols (as in `core.config`):
  p̃_m    the target's processed distribution at position m, i.e. the distribution the token
         x_{m+1} is drawn from (temperature / top-p / top-k applied)
  C_d(m) drafter d's top_k candidate ids at m, already mapped to the target vocabulary (d2t)
  γ_d(m) probability that the verifier accepts one of C_d(m) at m:
         greedy:   1{argmax p̃_m ∈ C_d(m)}
         sampling: Σ_{c ∈ C_d(m)} p̃_m(c)   (EAGLE tree verification, reference 2.6)
  K      tree depth; a round rooted at s draws on γ_d(s), ..., γ_d(s+K-1)
  ÂL_d   HedgeSpec's acceptance-length estimate of that round, in [1, K+1]

Shape letters: N drafters, M positions, k candidates per position, V target vocabulary.
All functions are pure numpy. Reference: HedgeSpec, arXiv 2510.20064 (Theorem 3).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def gamma_greedy(target_argmax: npt.ArrayLike, topk_ids: npt.ArrayLike) -> FloatArray:
    """γ for greedy decoding: 1.0 where the target argmax is among a drafter's candidates."""
    argmax = np.asarray(target_argmax)  # [M]
    ids = np.asarray(topk_ids)  # [N, M, k]
    if argmax.ndim != 1 or ids.ndim != 3 or ids.shape[1] != argmax.shape[0]:
        raise ValueError(f"expected target_argmax [M], topk_ids [N, M, k]; got "
                         f"{argmax.shape} and {ids.shape}")
    return (ids == argmax[None, :, None]).any(axis=-1).astype(np.float64)  # [N, M]


def gamma_sampling(target_probs: npt.ArrayLike, topk_ids: npt.ArrayLike) -> FloatArray:
    """γ for sampled decoding: target mass of each drafter's distinct candidates."""
    probs = np.asarray(target_probs, dtype=np.float64)  # [M, V]
    ids = np.asarray(topk_ids)  # [N, M, k]
    if probs.ndim != 2 or ids.ndim != 3 or ids.shape[1] != probs.shape[0]:
        raise ValueError(f"expected target_probs [M, V], topk_ids [N, M, k]; got "
                         f"{probs.shape} and {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= probs.shape[1]):
        raise ValueError("candidate ids must lie in [0, V)")
    ids = np.sort(ids, axis=-1)
    # A drafter can propose the same target id twice (d2t collisions): count it once.
    first = np.ones(ids.shape, dtype=bool)
    first[..., 1:] = ids[..., 1:] != ids[..., :-1]
    rows = np.arange(probs.shape[0])[None, :, None]  # [1, M, 1]
    mass = np.where(first, probs[rows, ids], 0.0).sum(axis=-1)  # [N, M]
    return np.clip(mass, 0.0, 1.0)  # float rounding can push a full-mass sum past 1


def estimate_length(gammas: npt.ArrayLike) -> FloatArray:
    """ÂL_d = 1 + Σ_{k=1..K} Π_{j<k} γ_d(j): expected tokens committed by a round whose level
    k is accepted with probability γ_d(k-1) given all earlier levels were (bonus included).

    gammas: [N, K] (or [K]); returns [N] (or a scalar array).
    """
    g = _checked_probabilities(gammas)
    return 1.0 + np.cumprod(g, axis=-1).sum(axis=-1)


def length_loss(est_len: npt.ArrayLike, K: int) -> FloatArray:
    """Acceptance-length loss f_d = 1 - ÂL_d/(K+1), in [0, 1]."""
    if K < 1:
        raise ValueError("K must be >= 1")
    est = np.asarray(est_len, dtype=np.float64)  # [N]
    return np.clip(1.0 - est / (K + 1), 0.0, 1.0)


def prob_loss(gamma_first: npt.ArrayLike) -> FloatArray:
    """Acceptance-probability loss f_d = 1 - γ_d(s), in [0, 1]."""
    return 1.0 - _checked_probabilities(gamma_first)  # [N]


def simulate_acceptance(gammas: npt.ArrayLike, rng: np.random.Generator, n: int) -> IntArray:
    """Draw n accepted lengths from the process `estimate_length` models.

    Level k is accepted with probability γ_{k-1} given every earlier level was accepted; the
    accepted length is 1 (the bonus token) plus the number of leading accepted levels.
    gammas: [K]; returns [n] integers in [1, K+1].
    """
    g = _checked_probabilities(gammas)
    if g.ndim != 1:
        raise ValueError(f"expected gammas [K], got {g.shape}")
    accepted = rng.random((n, g.shape[0])) < g  # [n, K]
    return 1 + np.cumprod(accepted, axis=1).sum(axis=1, dtype=np.int64)


def _checked_probabilities(values: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    # Written as a negation so that NaN fails the check too.
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        raise ValueError("acceptance probabilities must lie in [0, 1]")
    return arr
