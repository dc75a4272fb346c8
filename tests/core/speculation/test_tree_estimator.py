"""The tree-aware counterfactual estimator (issue 14, item 1): the candidates it credits are
those core/speculation/drafting.grow_tree really keeps for a drafter whose deeper-level
distributions are its catch-up distributions, greedy γ are exact indicators, sampled γ are the
acceptance probabilities of core/speculation/verify's verifier on that tree, and it separates
drafters that the unpruned top-k estimator ties."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import Tensor

from bench.harness.tiny_models import fresh_noise
from core.config import TreeConfig
from core.selection.counterfactual import (
    Evidence,
    _kept_gammas,
    _kept_length,
    estimate_length,
    evidence_greedy,
    evidence_sampling,
    gamma_greedy,
    gamma_sampling,
    gammas_topk,
    gammas_tree,
    simulate_acceptance,
    tree_kept,
    tree_length,
    window_estimates,
)
from core.selection.feedback import FeedbackQueue
from core.speculation.drafting import grow_tree
from core.speculation.tree import DraftTree
from core.speculation.verify import verify_sampling

V = 12


class DepthOnlyDrafter:
    """A stand-in for Eagle3Drafter whose distribution at tree level j is table[j-1] for every
    node (its hidden state carries the level), so the catch-up distributions along any path
    are exactly its deeper-level distributions."""

    def __init__(self, table: Tensor, position: int) -> None:
        self.table, self.position = table, position  # [K, V] logits

    def logits(self, h: Tensor) -> Tensor:
        return self.table[h[..., 0].long()]

    def draft_to_target(self, ids: Tensor) -> Tensor:
        return ids

    def step(self, h: Tensor, tokens: Tensor, pos: Tensor, attend: Callable[..., Tensor]) -> Tensor:
        b, m = tokens.shape
        attend(*(torch.zeros(b, 1, m, 1) for _ in range(3)))  # the engine's cache bookkeeping
        # [B, m, 1]: the children's level - 1
        return (pos - self.position + 1).to(torch.float32)[..., None]


def real_tree(table: Tensor, cfg: TreeConfig) -> DraftTree:
    position = 3
    kv = (torch.zeros(1, 1, position, 1), torch.zeros(1, 1, position, 1))
    drafter = DepthOnlyDrafter(table, position)
    return grow_tree(drafter, kv, torch.zeros(1), 0, position, cfg)  # type: ignore[arg-type]


def catch_up_topk(table: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """What the evaluation's catch-up yields: ids and log q of each level's top-k, [1, K, k]."""
    top = torch.topk(torch.log_softmax(table.float(), dim=-1), k, dim=-1)
    return top.indices.numpy()[None], top.values.double().numpy()[None]


def random_path(rng: np.random.Generator, ids: np.ndarray) -> np.ndarray:
    """Realised tokens: usually one of the level's candidates, sometimes another token."""
    out = []
    for row in ids[0]:
        if rng.random() < 0.85:
            out.append(int(rng.choice(row)))
        else:
            out.append(int(rng.choice(sorted(set(range(V)) - set(row.tolist())))))
    return np.array(out)


def children_along(tree: DraftTree, path: np.ndarray) -> list[set[int]]:
    """Token sets of the real tree's children under the realised path's node, per level."""
    sets, node = [], 0
    for tok in path:
        if node is None:
            sets.append(set())
            continue
        kids = {int(tree.tokens[c]): c for c in tree.children[node]}
        sets.append(set(kids))
        node = kids.get(int(tok))
    return sets


CASES = list(itertools.product([1, 2, 3, 4], [1, 2, 4, 5], [1, 3, 6, 10, 40], range(4)))


@pytest.mark.parametrize(("top_k", "depth", "total", "seed"), CASES)
def test_kept_candidates_equal_the_real_grow_and_prune(top_k: int, depth: int, total: int,
                                                       seed: int) -> None:
    cfg = TreeConfig(top_k=top_k, depth=depth, total_tokens=total)
    rng = np.random.default_rng(seed)
    table = torch.from_numpy(rng.normal(0, 2.0, (depth, V))).float()
    tree = real_tree(table, cfg)
    ids, logp = catch_up_topk(table, top_k)
    for _ in range(6):
        path = random_path(rng, ids)
        ev = evidence_greedy(path, ids, logp)
        kept = tree_kept(ev, cfg.total_tokens)[0]
        want = children_along(tree, path)
        got = [{int(t) for t in ids[0, j][kept[j]]} for j in range(depth)]
        assert got == want
        # Greedy: γ at level j is exactly the indicator that the real tree offers the target's
        # token there, given the levels above were accepted.
        gam = gammas_tree(ev, cfg.total_tokens)[0]
        assert set(np.unique(gam)) <= {0.0, 1.0}
        assert [bool(g) for g in gam] == [int(path[j]) in want[j] for j in range(depth)]


def test_sampled_gammas_are_the_verifier_acceptance_probabilities_on_the_real_tree() -> None:
    """Monte Carlo of core.speculation.verify.verify_sampling on the real tree, with a target whose
    p̃ at level j is the same at every node: P(level 1 accepted) = γ(1), and P(level 2 accepted |
    level 1 accepted token x) = γ(2) for the window whose realised level-1 token is x."""
    cfg = TreeConfig(top_k=3, depth=3, total_tokens=7)
    rng = np.random.default_rng(3)
    table = torch.from_numpy(rng.normal(0, 1.5, (cfg.depth, V))).float()
    p_level = rng.dirichlet(np.full(V, 0.7), size=cfg.depth + 1)  # [K+1, V]
    tree = real_tree(table, cfg)
    node_probs = torch.from_numpy(p_level[tree.depths.numpy()]).float()
    gen = torch.Generator().manual_seed(0)
    n = 6000
    paths = [verify_sampling(tree, node_probs, fresh_noise(gen), 0)[0] for _ in range(n)]
    first = [int(tree.tokens[p[1]]) if len(p) > 1 else -1 for p in paths]
    ids, logp = catch_up_topk(table, cfg.top_k)

    def gammas(x1: int) -> np.ndarray:
        realised = np.array([x1, 0, 0])  # deeper realised tokens do not matter for γ(1), γ(2)
        return gammas_tree(evidence_sampling(p_level[:cfg.depth], ids, logp, realised),
                           cfg.total_tokens)[0]

    accept1 = np.mean([len(p) > 1 for p in paths])
    g1 = gammas(int(ids[0, 0, 0]))[0]
    assert abs(accept1 - g1) < 4 * np.sqrt(g1 * (1 - g1) / n) + 1e-9
    tested = 0
    for x1 in set(first) - {-1}:
        given = [len(p) > 2 for p, f in zip(paths, first, strict=True) if f == x1]
        if len(given) < 500:
            continue
        g2 = gammas(x1)[1]
        assert abs(np.mean(given) - g2) < 4 * np.sqrt(max(g2 * (1 - g2), 1e-4) / len(given))
        tested += 1
    assert tested >= 1


def test_the_estimator_fed_tree_gammas_matches_the_monte_carlo_mean_of_its_process() -> None:
    rng = np.random.default_rng(11)
    # [2, 4, 3]
    ids = np.stack([np.stack([rng.permutation(V)[:3] for _ in range(4)]) for _ in range(2)])
    logp = np.sort(np.log(rng.dirichlet(np.ones(V), size=(2, 4))), axis=-1)[..., ::-1][..., :3]
    probs = rng.dirichlet(np.ones(V), size=4)
    ev = evidence_sampling(probs, ids, logp, ids[0, :, 0])
    g = gammas_tree(ev, total_tokens=8)
    for d in range(2):
        draws = simulate_acceptance(g[d], np.random.default_rng(d), 200_000)
        assert abs(draws.mean() - estimate_length(g[d])) < 0.01


def test_topk_evidence_reproduces_the_one_step_gammas() -> None:
    rng = np.random.default_rng(5)
    ids = rng.integers(0, V, size=(3, 6, 4))
    logp = np.sort(rng.normal(-2, 1, size=(3, 6, 4)), axis=-1)[..., ::-1]
    probs = rng.dirichlet(np.ones(V), size=6)
    argmax = probs.argmax(axis=-1)
    np.testing.assert_array_equal(gammas_topk(evidence_greedy(argmax, ids, logp)),
                                  gamma_greedy(argmax, ids))
    np.testing.assert_allclose(gammas_topk(evidence_sampling(probs, ids, logp, argmax)),
                               gamma_sampling(probs, ids))


def test_a_chain_that_keeps_every_level_equals_the_topk_estimator() -> None:
    rng = np.random.default_rng(2)
    ids = rng.integers(0, V, size=(4, 5, 1))
    logp = rng.normal(-1, 0.5, size=(4, 5, 1))
    argmax = ids[0, :, 0]
    ev = evidence_greedy(argmax, ids, logp)
    # Per level they differ only after a miss (the modelled path ends there), so ÂL agrees.
    np.testing.assert_array_equal(estimate_length(gammas_tree(ev, total_tokens=5)),
                                  estimate_length(gammas_topk(ev)))


def test_the_tree_separates_drafters_the_unpruned_topk_ties() -> None:
    """Both drafters always have the target's token in their top-4; one ranks it first, the
    other last. The top-k estimator gives both ÂL = K+1; the tree keeps the confident one's
    path and prunes the other's."""
    K, k = 5, 4
    confident = np.tile(np.log([0.7, 0.1, 0.1, 0.1]), (K, 1))
    hesitant = np.tile(np.log([0.3, 0.25, 0.25, 0.2]), (K, 1))
    logp = np.stack([confident, hesitant])  # [2, K, k]
    credit = np.zeros((2, K, k))
    credit[0, :, 0] = 1.0
    credit[1, :, 3] = 1.0
    rank = np.array([[0] * K, [3] * K])
    ev = Evidence(logp, credit, rank)
    np.testing.assert_array_equal(estimate_length(gammas_topk(ev)), [K + 1, K + 1])
    est = estimate_length(gammas_tree(ev, total_tokens=10))
    assert est[0] == K + 1 and est[1] < 3


def test_tree_windows_depend_on_their_root() -> None:
    """Position 1 is level 2 of the window rooted at 0 but level 1 of the one rooted at 1: the
    same candidate is pruned in the first tree (its parent's score drags it below the cut)
    and kept in the second."""
    logp = np.log(np.array([[[0.9, 0.1], [0.55, 0.45], [0.6, 0.4]]]))  # [1, 3 positions, k=2]
    rank = np.array([[0, 1, 0]])  # the realised (greedy: target) token's rank at each position
    credit = np.zeros((1, 3, 2))
    credit[0, [0, 1, 2], rank[0]] = 1.0
    queue = FeedbackQueue(1, depth=2, estimator="tree", total_tokens=2)
    queue.open_window(0, chosen=0, realised=1)
    queue.open_window(1, chosen=0, realised=1)
    queue.add_evidence(0, Evidence(logp, credit, rank))
    first, second = queue.pop_completed()
    np.testing.assert_array_equal(first.gammas, [[1.0, 0.0]])  # 0.9·0.45 < 0.9·0.55, 2 kept
    np.testing.assert_array_equal(second.gammas, [[1.0, 0.0]])  # 0.45 kept; 0.45·0.6 < 0.55
    assert gammas_topk(Evidence(logp, credit, rank)).tolist() == [[1.0, 1.0, 1.0]]


def test_prob_loss_under_topk_reaches_the_learner_once_gamma_s_is_known() -> None:
    queue = FeedbackQueue(2, depth=3, loss="prob")
    queue.open_window(0, chosen=0, realised=1)
    queue.add_gammas(0, np.array([[0.25], [0.5]]))
    [early] = queue.pop_losses()
    loss = early.loss
    np.testing.assert_allclose(loss, [0.75, 0.5])
    assert queue.pop_completed() == [] and queue.pop_losses() == []  # the window waits for ÂL
    queue.add_gammas(1, np.array([[0.5, 0.5], [0.5, 0.5]]))
    [window] = queue.pop_completed()
    np.testing.assert_allclose(window.loss, loss)
    assert queue.pop_losses() == []  # handed out once
    tree = FeedbackQueue(2, depth=3, loss="prob", estimator="tree", total_tokens=5)
    tree.open_window(0, chosen=0, realised=1)
    tree.add_gammas(0, np.array([[0.25], [0.5]]))
    assert tree.pop_losses() == []  # under the tree, γ(s) depends on the whole window


def test_position_windows_feed_the_learner_but_not_the_statistics() -> None:
    queue = FeedbackQueue(1, depth=2)
    queue.open_window(0, chosen=0, realised=3)
    queue.open_window(1, chosen=None, realised=None)
    queue.open_window(2, chosen=None, realised=None)
    queue.add_gammas(0, np.array([[0.5, 0.5, 0.5, 0.5]]))
    assert len(queue.pop_losses()) == 3
    windows = queue.pop_completed()
    assert [w.is_round for w in windows] == [True, False, False]


@pytest.fixture(scope="module")
def engine_setup():  # type: ignore[no-untyped-def]
    from bench.harness.tiny_models import bigram_setup

    return bigram_setup(TreeConfig(top_k=3, depth=4, total_tokens=8), randoms=5)


def with_selector(engine, **selector):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from core.engine import SpecEngine

    cfg = replace(engine.config, selector=replace(engine.config.selector, **selector))
    return SpecEngine(engine.target, dict(engine.snapshot.drafters), cfg)


@pytest.mark.parametrize("estimator", ["tree", "topk"])
def test_engine_variants_stay_lossless_and_find_the_copying_drafter(
        engine_setup, monkeypatch, estimator: str) -> None:  # type: ignore[no-untyped-def]
    from bench.harness.tiny_models import hf_greedy
    from core.config import SamplingParams
    from core.selection.learners import NormalHedge

    target, engine = engine_setup
    updates: list[int] = []
    original = NormalHedge.update

    def counted(self, losses):  # type: ignore[no-untyped-def]
        updates.append(1)
        return original(self, losses)

    monkeypatch.setattr(NormalHedge, "update", counted)
    eng = with_selector(engine, estimator=estimator)
    ids, stats = eng.generate_ids([7], SamplingParams(max_new_tokens=100, ignore_eos=True),
                                  "normalhedge")
    assert ids == hf_greedy(target, [7], 100)
    assert stats.weights["copy"] > 0.9 and stats.mean_acceptance_length > 3
    assert len(updates) <= len(stats.regret_curve)  # one window, one update, per round
    sampled, _ = eng.generate_ids([7], SamplingParams(max_new_tokens=30, temperature=1.0, seed=3,
                                                      ignore_eos=True), "normalhedge")
    assert len(sampled) == 30


# -- ÂL over realised trajectories (issue 40, defect A) and exact early close (defect D) --------

def test_tree_length_is_unbiased_over_realised_trajectories_of_the_real_verifier() -> None:
    """Truth: the mean committed length of core.speculation.verify.verify_sampling on the real tree.
    The estimator sees one realised trajectory per draw (x_j ~ p̃ at each level: verification is
    lossless), and its mean over trajectories must match. The paper's product along the path
    (estimate_length of the tree's γ) counts earlier levels twice and falls short."""
    cfg = TreeConfig(top_k=3, depth=4, total_tokens=9)
    rng = np.random.default_rng(7)
    table = torch.from_numpy(rng.normal(0, 1.5, (cfg.depth, V))).float()
    # a target close to the drafter (its logits plus noise), so that deep levels are reached
    logits = np.concatenate([table.numpy() + rng.normal(0, 0.7, (cfg.depth, V)),
                             rng.normal(0, 1.0, (1, V))])
    p_level = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)  # [K+1, V]
    tree = real_tree(table, cfg)
    node_probs = torch.from_numpy(p_level[tree.depths.numpy()]).float()
    gen = torch.Generator().manual_seed(1)
    n = 20_000
    truth = np.mean([len(verify_sampling(tree, node_probs, fresh_noise(gen), 0)[0])
                     for _ in range(n)])
    ids, logp = catch_up_topk(table, cfg.top_k)
    draws = np.stack([rng.choice(V, size=n, p=p_level[j]) for j in range(cfg.depth)], axis=1)
    est, paper = [], []
    for realised in draws[:4000]:
        ev = evidence_sampling(p_level[:cfg.depth], ids, logp, realised)
        est.append(tree_length(ev, cfg.total_tokens)[0])
        paper.append(estimate_length(gammas_tree(ev, cfg.total_tokens))[0])
    spread = np.std(est) / np.sqrt(len(est)) + 0.01  # + the truth's own Monte Carlo error
    assert abs(np.mean(est) - truth) < 4 * spread, (np.mean(est), truth)
    assert np.mean(paper) < truth - 0.1  # the double count this replaced


def test_the_worked_examples_of_the_review() -> None:
    """A chain whose level j is accepted with probability γ_j: γ = (0.5, 1, 1, 1) commits 3.0
    tokens on average (1 + 0.5 · 4); realised trajectories stay in the tree or leave it at
    level 1 with probability 0.5 each."""
    gam = np.array([0.5, 1.0, 1.0, 1.0])
    lengths = []
    for first_in in (True, False):
        credit = np.zeros((1, 4, 2))
        credit[0, :, 0] = gam  # candidate 0 holds the level's target mass
        rank = np.array([[0 if first_in else 1, 0, 0, 0]])
        credit[0, 0, 1] = 0.0 if first_in else 0.5  # the realised token outside C
        logp = np.log(np.tile([[0.9, 0.1]], (1, 4, 1)))
        logp[0, 0, 1] = -np.inf if first_in else np.log(0.1)
        ev = Evidence(logp, credit, np.where(rank == 1, -1, rank))
        lengths.append(tree_length(ev, total_tokens=4)[0])
    np.testing.assert_allclose(lengths, [4.5, 1.5])
    assert np.mean(lengths) == pytest.approx(3.0)


def deep_cut_evidence() -> Evidence:
    """Greedy, one drafter, K = 3, total_tokens = 3: the realised level-1 token is the weak
    candidate (0.05). Known to level 2 it survives the cut; level 3's children of the strong
    branch (0.9·0.95·0.95 = 0.81) push it out, so γ_1 turns 0 once position 2 is known."""
    logp = np.log(np.array([[[0.9, 0.05], [0.95, 0.05], [0.95, 0.05]]]))
    rank = np.array([[1, -1, 0]])  # level 2: the target's token is no candidate (γ_2 = 0)
    credit = np.zeros((1, 3, 2))
    credit[0, 0, 1] = credit[0, 2, 0] = 1.0
    return Evidence(logp, credit, rank)


def test_a_tree_window_closes_early_only_when_its_verdict_is_final() -> None:
    ev = deep_cut_evidence()
    whole = FeedbackQueue(1, depth=3, estimator="tree", total_tokens=3)
    whole.open_window(0, chosen=0, realised=1)
    whole.add_evidence(0, ev)
    [full] = whole.pop_completed()
    assert full.est_len.tolist() == [1.0]
    queue = FeedbackQueue(1, depth=3, estimator="tree", total_tokens=3)
    queue.open_window(0, chosen=0, realised=1)
    queue.add_evidence(0, ev.slice(0, 2))
    assert queue.pop_completed() == [] and queue.pop_losses() == []  # level 2's zero: not final
    queue.add_evidence(2, ev.slice(2, 3))
    [window] = queue.pop_completed()
    np.testing.assert_array_equal(window.est_len, full.est_len)
    np.testing.assert_array_equal(window.loss, full.loss)
    # a first-level zero is final at once: ÂL 1 whatever comes later
    first_zero = FeedbackQueue(1, depth=3, estimator="tree", total_tokens=3)
    first_zero.open_window(0, chosen=0, realised=1)
    first_zero.add_evidence(0, Evidence(ev.logp[:, :1], np.zeros((1, 1, 2)),
                                        np.array([[-1]])))
    [early] = first_zero.pop_completed()
    assert early.est_len.tolist() == [1.0] and not early.censored


def test_window_estimates_model_only_the_drafters_that_need_it_with_the_same_figures() -> None:
    """`window_estimates` builds the modelled tree only for drafters with credit and no known
    tree; the others' γ and ÂL must be what the whole computation gives (random windows, some
    drafters asleep, some with exact trees)."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n, depth, k = (int(x) for x in (rng.integers(1, 10), rng.integers(1, 7),
                                        rng.integers(1, 5)))
        logp = -np.sort(-np.log(rng.dirichlet(np.ones(k), size=(n, depth))), axis=-1)
        logp[rng.random((n, depth, k)) < 0.2] = -np.inf
        credit = np.where(np.isfinite(logp),
                          rng.random((n, depth, k)) * (rng.random((n, depth, k)) < 0.5), 0.0)
        credit[rng.random(n) < 0.3] = 0.0  # asleep, or no guess: no credit anywhere
        rank = np.where(rng.random((n, depth)) < 0.7, rng.integers(0, k, (n, depth)), -1)
        window = Evidence(logp, credit, rank)
        totals = rng.integers(1, 12, n) if trial % 2 else int(rng.integers(1, 12))
        exact = {d: rng.random((depth, k)) < 0.5 for d in range(n) if rng.random() < 0.3}
        kept = tree_kept(window, totals, exact)
        gammas, est = window_estimates(window, "tree", totals, exact)
        np.testing.assert_array_equal(gammas, _kept_gammas(window, kept))
        np.testing.assert_array_equal(est, _kept_length(window, kept))
