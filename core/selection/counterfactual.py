"""Counterfactual evaluation of every drafter on the verified trajectory (DESIGN.md §3, 5-6).

Symbols (as in `core.config`):
  p̃_m    the target's processed distribution at position m, i.e. the distribution the token
         x_{m+1} is drawn from (temperature / top-p / top-k applied)
  q_d    drafter d's one-step distribution at m, from its catch-up on the verified prefix
  C_d    the candidates drafter d's tree would offer the verifier at a node
  γ_d    probability that the verifier accepts one of C_d at that node:
         greedy:   1{argmax p̃_m ∈ C_d}
         sampling: Σ_{c ∈ C_d} p̃_m(c)   (EAGLE tree verification, reference 2.6)
  K      tree depth; a round rooted at s draws on positions s, ..., s+K-1
  ÂL_d   HedgeSpec's acceptance-length estimate of that round, in [1, K+1]

Two estimators of C_d, selected by `SelectorConfig.estimator`:
  "topk"  C_d(m) = the unpruned top_k of q_d at m, at every level (the paper's one-step
          counterfactual as usually read). It saturates: a drafter whose top_k contains the
          target's token almost always scores ÂL = K+1 although its real tree, pruned to
          total_tokens, is far smaller, so the losses of different drafters nearly tie.
  "tree"  C_d at level j = the children of the realised path's node that the drafter's own
          tree would keep: the node must have been expanded (it ranks in the top_k of its
          level by cumulative log-probability, EAGLE's beam rerank) and the child must rank in
          the top `total_tokens` of the whole tree. Deeper levels of a real tree run on the
          drafter's own features, which the evaluation does not have; the tree is modelled
          from the catch-up distributions instead, taking every node at level j to share the
          sorted top_k profile of q_d at the path position s+j-1. The model is exact for a
          drafter whose deeper-level distributions depend on the depth only, and needs no
          forward pass beyond the catch-up.

A level whose realised token is not among the modelled tree's nodes ends the modelled path:
deeper levels get γ = 0 (under greedy decoding γ at that level is 0 already).

ÂL of a window. "topk" keeps the paper's form 1 + Σ_k Π_{j≤k} γ_j. "tree" uses what the
realised trajectory already tells: verification is lossless, so x_j ~ p̃ and a level of a
tree is accepted exactly when x_j is among its children C_j (EAGLE's sampling verifier
accepts some c ∈ C_j with probability Σ_{c∈C_j} p̃(c), and the committed token is then
distributed as p̃; reference 2.6). The accepted length is 1 + Σ_k Π_{j≤k} 1{x_j ∈ C_j}, and
taking the last factor's expectation given x_{<k} gives the unbiased one-step form

    ÂL_d = 1 + Σ_{k=1..K} Π_{j<k} 1{x_j ∈ C_d,j} · γ_d,k            (`tree_length`)

The paper's product Π_{j≤k} γ_j along the realised path would count the levels before k twice
(once by the indicator that the path is still in the tree, once by γ): 6-13% low at T > 0,
and for γ = (0.5, 1, 1, 1) it expects 2.25 where the truth is 3.0. Under greedy decoding
γ_j = 1{x_j ∈ C_j}, so the two forms agree there.

Shape letters: N drafters, M positions, k candidates per position, V target vocabulary.
All functions are pure numpy. Reference: HedgeSpec, arXiv 2510.20064 (Theorems 2, 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
ESTIMATORS: tuple[str, ...] = ("topk", "tree")


@dataclass(frozen=True)
class Evidence:
    """What the catch-up tells about each drafter's candidates at M consecutive positions.

    logp:      [N, M, k] log q_d of its top-k candidates, best first (-inf: no candidate,
               whose id is -1)
    credit:    [N, M, k] what accepting each candidate is worth: p̃_m(c) when sampling,
               1{c = argmax p̃_m} when greedy; 0 for a repeated target id (d2t collisions)
    path_rank: [N, M] rank of the realised next token x_{m+1} among them, -1 if absent
    path_mass: [N, M] how surely the realised token is that candidate: 1 for a verified
               trajectory (None stands for that); γ for positions known only by their γ
               (from_gammas), where membership is known in expectation only
    """

    logp: FloatArray
    credit: FloatArray
    path_rank: IntArray
    path_mass: FloatArray | None = None

    @property
    def positions(self) -> int:
        return int(self.logp.shape[1])

    @property
    def mass(self) -> FloatArray:
        """path_mass, with a verified trajectory's 1 (or 0 where the token is no candidate)."""
        if self.path_mass is not None:
            return self.path_mass
        return (self.path_rank >= 0).astype(np.float64)

    def slice(self, lo: int, hi: int) -> Evidence:
        return Evidence(self.logp[:, lo:hi], self.credit[:, lo:hi], self.path_rank[:, lo:hi],
                        self.mass[:, lo:hi])

    def rows(self, index: IntArray) -> Evidence:
        """The drafters `index` only."""
        return Evidence(self.logp[index], self.credit[index], self.path_rank[index],
                        self.mass[index])

    def padded(self, length: int) -> Evidence:
        """The first `length` positions, unknown ones as positions with no candidate."""
        n, m, k = self.logp.shape
        pad = max(0, length - m)
        return Evidence(
            np.concatenate([self.logp[:, :length], np.full((n, pad, k), -np.inf)], axis=1),
            np.concatenate([self.credit[:, :length], np.zeros((n, pad, k))], axis=1),
            np.concatenate([self.path_rank[:, :length], np.full((n, pad), -1, dtype=np.int64)],
                           axis=1),
            np.concatenate([self.mass[:, :length], np.zeros((n, pad))], axis=1),
        )

    def truncated(self, depths: IntArray) -> Evidence:
        """Drafter d's positions from depths[d] on as positions with no candidate: a drafter
        whose trees are shallower than the window cannot be credited for deeper levels."""
        beyond = np.arange(self.positions)[None, :] >= np.asarray(depths)[:, None]  # [N, M]
        if not beyond.any():
            return self
        return Evidence(np.where(beyond[..., None], -np.inf, self.logp),
                        np.where(beyond[..., None], 0.0, self.credit),
                        np.where(beyond, -1, self.path_rank),
                        np.where(beyond, 0.0, self.mass))

    @property
    def awake(self) -> BoolArray:
        """[N, M] whether each drafter has a candidate at each position. A drafter with none at
        a window's first position is asleep for that window (core/selection/learners.py)."""
        return np.asarray(np.isfinite(self.logp).any(axis=-1))

    @staticmethod
    def interleave(parts: list[tuple[list[int], Evidence]]) -> Evidence:
        """Evidence of disjoint sets of drafters (their indices, then their evidence) as one, in
        index order; candidates padded to the widest part (no candidate: log q -inf)."""
        k = max(e.logp.shape[2] for _, e in parts)
        order = np.argsort([i for idx, _ in parts for i in idx], kind="stable")
        def cat(field: str, fill: float) -> FloatArray:
            rows = [np.concatenate([getattr(e, field), np.full(
                e.logp.shape[:2] + (k - e.logp.shape[2],), fill)], axis=2) for _, e in parts]
            return np.concatenate(rows)[order]
        return Evidence(cat("logp", -np.inf), cat("credit", 0.0),
                        np.concatenate([e.path_rank for _, e in parts])[order],
                        np.concatenate([e.mass for _, e in parts])[order])

    @staticmethod
    def concat(parts: list[Evidence]) -> Evidence:
        return Evidence(np.concatenate([e.logp for e in parts], axis=1),
                        np.concatenate([e.credit for e in parts], axis=1),
                        np.concatenate([e.path_rank for e in parts], axis=1),
                        np.concatenate([e.mass for e in parts], axis=1))

    def widened(self, k: int) -> Evidence:
        """The same evidence with `k` candidate slots (at least its own): the extra ones hold
        no candidate."""
        n, m, own = self.logp.shape
        if k <= own:
            return self
        pad = (n, m, k - own)
        return Evidence(np.concatenate([self.logp, np.full(pad, -np.inf)], axis=2),
                        np.concatenate([self.credit, np.zeros(pad)], axis=2),
                        self.path_rank, self.path_mass)

    @staticmethod
    def none(drafters: int, positions: int) -> Evidence:
        """Positions where `drafters` have no candidate: asleep there (no catch-up ran)."""
        return Evidence(np.full((drafters, positions, 1), -np.inf),
                        np.zeros((drafters, positions, 1)),
                        np.full((drafters, positions), -1, dtype=np.int64))

    @staticmethod
    def from_gammas(gammas: npt.ArrayLike) -> Evidence:
        """Positions known only by their γ ([N, M]): one candidate worth γ, the realised one
        with mass γ. Both estimators then return exactly these γ and ÂL = 1 + Σ_k Π_{j≤k} γ_j
        (a chain of one candidate per level)."""
        g = _checked_probabilities(gammas)
        return Evidence(np.zeros(g.shape + (1,)), g[..., None].copy(),
                        np.zeros(g.shape, dtype=np.int64), g.copy())


def evidence_greedy(target_argmax: npt.ArrayLike, topk_ids: npt.ArrayLike,
                    topk_logp: npt.ArrayLike) -> Evidence:
    """Greedy decoding: the realised next token is the target argmax."""
    argmax = np.asarray(target_argmax)  # [M]
    ids = np.asarray(topk_ids)  # [N, M, k]
    _check_ids(ids, argmax.shape[0])
    hit = _first_occurrence(ids) & (ids == argmax[None, :, None])
    return Evidence(_logp(topk_logp, ids.shape), hit.astype(np.float64), _rank_of(ids, argmax))


def evidence_sampling(target_probs: npt.ArrayLike, topk_ids: npt.ArrayLike,
                      topk_logp: npt.ArrayLike, realised: npt.ArrayLike) -> Evidence:
    """Sampled decoding: credit = target mass of each distinct candidate."""
    probs = np.asarray(target_probs, dtype=np.float64)  # [M, V]
    ids = np.asarray(topk_ids)  # [N, M, k]
    _check_ids(ids, probs.shape[0])
    if ids.size and (ids.min() < -1 or ids.max() >= probs.shape[1]):
        raise ValueError("candidate ids must lie in [0, V) (-1: no candidate)")
    rows = np.arange(probs.shape[0])[None, :, None]  # [1, M, 1]
    credit = np.where(_first_occurrence(ids) & (ids >= 0), probs[rows, np.maximum(ids, 0)], 0.0)
    return Evidence(_logp(topk_logp, ids.shape), credit, _rank_of(ids, np.asarray(realised)))


def gammas_topk(ev: Evidence) -> FloatArray:
    """γ with C = the unpruned top_k at every level: [N, M]."""
    return np.clip(ev.credit.sum(axis=-1), 0.0, 1.0)  # rounding can push a full mass past 1


TotalTokens = int | IntArray  # one tree size for every drafter, or one per drafter ([N])
# Drafters whose kept candidates are known exactly ([K, k] per drafter index): a model-free
# drafter's real tree walked along the realised path (core/selection/feedback.py), not modelled.
KeptOverride = dict[int, BoolArray]


def tree_kept(window: Evidence, total_tokens: TotalTokens,
              override: KeptOverride | None = None) -> BoolArray:
    """Which candidates at each level of a window are children that the drafter's modelled
    tree keeps under the realised path's node ([N, K, k]; see the module docstring).

    window: the K positions s..s+K-1 of a round rooted at s (unknown ones padded). The tree
    mirrors core.speculation.drafting.grow_tree: level 1 = the root's top_k, every later level =
    top_k children of each of the top_k nodes of the level above (by cumulative log q), and the tree
    keeps the `total_tokens` best candidates overall.
    """
    logp, rank = window.logp, window.path_rank  # [N, K, k], [N, K]
    n, depth, k = logp.shape
    totals = np.broadcast_to(np.asarray(total_tokens, dtype=np.int64), (n,))
    if (totals < 1).any():
        raise ValueError("total_tokens must be >= 1")
    pool = [logp[:, 0]]  # candidates per level; level 1 = the root's top_k
    parent = np.zeros(n)  # cumulative log q of the path's node above the current level
    parent_open = np.ones(n, dtype=bool)  # that node exists and was expanded (the root is)
    parents, opens = [parent], [parent_open]
    for j in range(1, depth):
        above = pool[j - 1]
        node, exists = _path_node(parent, parent_open, logp[:, j - 1], rank[:, j - 1])
        # Only the top_k nodes of a level by cumulative score get children (EAGLE's rerank).
        parent_open = exists & (node >= _kth_largest(above, k))
        parent = node
        parents.append(parent)
        opens.append(parent_open)
        expanded = -np.sort(-above, axis=1)[:, :k]  # [N, k]
        # Every expanded node has the profile of q at this level's path position.
        pool.append((expanded[:, :, None] + logp[:, j, None, :]).reshape(n, -1))
    tau = _kth_largest(np.concatenate(pool, axis=1), totals)  # [N] the cut of the tree
    score = np.stack(parents, axis=1)[:, :, None] + logp  # [N, K, k] the path nodes' children
    kept = np.stack(opens, axis=1)[:, :, None] & np.isfinite(score) & (score >= tau[:, None, None])
    for d, mask in (override or {}).items():
        kept[d] = mask
    return np.asarray(kept)


def gammas_tree(window: Evidence, total_tokens: TotalTokens,
                override: KeptOverride | None = None) -> FloatArray:
    """γ with C = the children the drafter's modelled tree keeps under the path: [N, K]."""
    return _kept_gammas(window, tree_kept(window, total_tokens, override))


def _kept_gammas(window: Evidence, kept: BoolArray) -> FloatArray:
    return np.clip(np.where(kept, window.credit, 0.0).sum(axis=-1), 0.0, 1.0)


def tree_length(window: Evidence, total_tokens: TotalTokens,
                override: KeptOverride | None = None) -> FloatArray:
    """ÂL under the "tree" estimator, 1 + Σ_k Π_{j<k} 1{x_j ∈ C_j} · γ_k (module docstring):
    [N] for a window [N, K, k]."""
    return _kept_length(window, tree_kept(window, total_tokens, override))


def _kept_length(window: Evidence, kept: BoolArray) -> FloatArray:
    gammas = _kept_gammas(window, kept)  # [N, K]
    rank = np.maximum(window.path_rank, 0)[..., None]  # [N, K, 1]
    on_path = np.take_along_axis(kept, rank, axis=-1)[..., 0] * window.mass  # [N, K]
    reach = np.cumprod(np.concatenate([np.ones_like(on_path[:, :1]), on_path[:, :-1]],
                                      axis=1), axis=1)  # Π_{j<k}
    return 1.0 + (reach * gammas).sum(axis=-1)


def window_estimates(window: Evidence, estimator: str, total_tokens: TotalTokens,
                     override: KeptOverride | None = None) -> tuple[FloatArray, FloatArray]:
    """γ ([N, K]) and ÂL ([N]) of one round's window, as `window_gammas` and `window_length`
    give them, with the tree's kept candidates computed once (the feedback queue judges a few
    thousand windows a second at 16 streams)."""
    if estimator == "tree":
        return _tree_estimates(window, total_tokens, override or {})
    gammas = window_gammas(window, estimator, total_tokens)
    return gammas, estimate_length(gammas)


def _tree_estimates(window: Evidence, total_tokens: TotalTokens,
                    override: KeptOverride) -> tuple[FloatArray, FloatArray]:
    """`window_estimates` under "tree", the modelled tree built only for the drafters that need
    it: not those whose kept candidates are known (`override`), nor those with no credit in
    the window (an asleep drafter's, a model-free member with no guess), whose γ is 0 and ÂL 1
    whatever they keep. Exactly `tree_kept`'s figures, for a fraction of its time where most
    members are model-free or asleep (the evaluation of a loaded server's plain rounds)."""
    n = window.logp.shape[0]
    gammas, est = np.zeros((n, window.positions)), np.ones(n)
    credited: BoolArray = np.asarray(window.credit.reshape(n, -1).any(axis=1))
    modelled = np.array([i for i in range(n) if credited[i] and i not in override],
                        dtype=np.int64)
    if modelled.size:
        sub = window.rows(modelled)
        totals = np.broadcast_to(np.asarray(total_tokens, dtype=np.int64), (n,))[modelled]
        kept = tree_kept(sub, totals)
        gammas[modelled], est[modelled] = _kept_gammas(sub, kept), _kept_length(sub, kept)
    known = np.array([d for d in override if credited[d]], dtype=np.int64)
    if known.size:
        sub = window.rows(known)
        kept = np.stack([override[int(d)] for d in known])
        gammas[known], est[known] = _kept_gammas(sub, kept), _kept_length(sub, kept)
    return gammas, est


def window_length(window: Evidence, estimator: str, total_tokens: TotalTokens,
                  override: KeptOverride | None = None) -> FloatArray:
    """ÂL of one round's window ([N]) under the named estimator (ESTIMATORS); `override`
    applies to "tree" only."""
    if estimator == "tree":
        return tree_length(window, total_tokens, override)
    return estimate_length(window_gammas(window, estimator, total_tokens))


def window_gammas(window: Evidence, estimator: str, total_tokens: TotalTokens,
                  override: KeptOverride | None = None) -> FloatArray:
    """γ of one round's window ([N, K]) under the named estimator (ESTIMATORS)."""
    if estimator == "topk":
        return gammas_topk(window)
    if estimator == "tree":
        return gammas_tree(window, total_tokens, override)
    raise ValueError(f"unknown estimator {estimator!r}; expected one of {ESTIMATORS}")


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


def _path_node(parent: FloatArray, parent_open: BoolArray, logp: FloatArray,
               rank: IntArray) -> tuple[FloatArray, BoolArray]:
    """Cumulative score of the realised token's node one level down, and whether it exists."""
    ok = parent_open & (rank >= 0)
    own = np.take_along_axis(logp, np.maximum(rank, 0)[:, None], axis=1)[:, 0]
    return np.where(ok, parent + own, -np.inf), ok & np.isfinite(own)


def _kth_largest(scores: FloatArray, kth: int | IntArray) -> FloatArray:
    """Per row, the kth largest score ([N]; kth one for all rows or one per row); -inf for a
    row with fewer (everything passes)."""
    n, width = scores.shape
    ks = np.broadcast_to(np.asarray(kth, dtype=np.int64), (n,))
    ranked = -np.sort(-scores, axis=1)
    out = np.full(n, -np.inf)
    fits = ks <= width
    out[fits] = ranked[np.flatnonzero(fits), ks[fits] - 1]
    return out


def _first_occurrence(ids: npt.NDArray[np.int64]) -> BoolArray:
    """[N, M, k] True where a target id appears for the first time in its row of candidates
    (a drafter can propose the same target id twice through d2t collisions: count it once)."""
    order = np.argsort(ids, axis=-1, kind="stable")
    sorted_ids = np.take_along_axis(ids, order, axis=-1)
    first_sorted = np.ones(ids.shape, dtype=bool)
    first_sorted[..., 1:] = sorted_ids[..., 1:] != sorted_ids[..., :-1]
    first = np.empty_like(first_sorted)
    np.put_along_axis(first, order, first_sorted, axis=-1)
    return first


def _rank_of(ids: npt.NDArray[np.int64], tokens: npt.NDArray[np.int64]) -> IntArray:
    """[N, M] first rank of tokens[m] among ids[:, m], -1 if absent."""
    hit = ids == tokens[None, :, None]
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1), -1).astype(np.int64)


def _logp(topk_logp: npt.ArrayLike, shape: tuple[int, ...]) -> FloatArray:
    logp = np.asarray(topk_logp, dtype=np.float64)
    if logp.shape != shape:
        raise ValueError(f"topk_logp {logp.shape} must match topk_ids {shape}")
    return logp


def _check_ids(ids: npt.NDArray[np.int64], positions: int) -> None:
    if ids.ndim != 3 or ids.shape[1] != positions:
        raise ValueError(f"expected topk_ids [N, {positions}, k], got {ids.shape}")


def _checked_probabilities(values: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    # Written as a negation so that NaN fails the check too.
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        raise ValueError("acceptance probabilities must lie in [0, 1]")
    return arr
