"""core/speculation/verify.py against a scripted-logits table: one fixed draft tree, target outputs
chosen per node, and the accepted path and bonus token each must give.

The tree (node: token, parent); siblings in try order:

    0: 9 (root)
    ├── 1: 5
    │   ├── 3: 3
    │   └── 4: 4
    └── 2: 7
        └── 5: 6
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from bench.harness.tiny_models import fresh_noise
from core.speculation.tree import DraftTree, tree_from_parents
from core.speculation.verify import verify_greedy, verify_sampling

V = 10  # vocabulary size
TREE: DraftTree = tree_from_parents(
    torch.tensor([9, 5, 7, 3, 4, 6]), torch.tensor([-1, 0, 0, 1, 1, 2])
)


def scripted_logits(argmax: dict[int, int]) -> Tensor:
    """[N+1, V] logits whose argmax at node i is argmax[i] (token 0 where unscripted)."""
    logits = torch.randn(TREE.tokens.numel(), V, generator=torch.Generator().manual_seed(0))
    logits = logits.clamp(-1, 1)
    for node, token in argmax.items():
        logits[node, token] = 10.0
    return logits


GREEDY_TABLE = [  # (target argmax per node, accepted path, bonus token)
    ({0: 8}, [0], 8),  # no child of the root matches: only the bonus
    ({0: 5, 1: 8}, [0, 1], 8),  # first child accepted, then a miss
    ({0: 5, 1: 3, 3: 2}, [0, 1, 3], 2),  # a full path to a leaf; bonus from the leaf
    ({0: 5, 1: 4, 4: 1}, [0, 1, 4], 1),  # the second sibling matches
    ({0: 7, 2: 6, 5: 0}, [0, 2, 5], 0),  # the root's second child's subtree
    ({0: 7, 2: 3}, [0, 2], 3),  # 3 is a child of node 1, not of node 2: a miss here
]


@pytest.mark.parametrize(("argmax", "path", "bonus"), GREEDY_TABLE)
def test_greedy_accepts_the_longest_argmax_path(
    argmax: dict[int, int], path: list[int], bonus: int
) -> None:
    assert verify_greedy(TREE, scripted_logits(argmax)) == (path, bonus)


def one_hot(rows: dict[int, int]) -> Tensor:
    """p̃ that puts all mass on rows[i] at node i (uniform where unscripted)."""
    probs = torch.full((TREE.tokens.numel(), V), 1.0 / V)
    for node, token in rows.items():
        probs[node] = 0.0
        probs[node, token] = 1.0
    return probs


@pytest.mark.parametrize(("argmax", "path", "bonus"), GREEDY_TABLE)
def test_sampling_with_deterministic_targets_equals_greedy(
    argmax: dict[int, int], path: list[int], bonus: int
) -> None:
    """With p̃ one-hot at every node the sampling rule has one outcome: the greedy one."""
    gen = torch.Generator().manual_seed(1)
    leaf_rows = {n: argmax.get(n, 0) for n in range(TREE.tokens.numel())}
    for _ in range(20):
        assert verify_sampling(TREE, one_hot(leaf_rows), fresh_noise(gen), 0) == (path, bonus)


def test_all_the_mass_on_children_always_accepts_one() -> None:
    """p̃(root) = ½ on 5 (node 1) and ½ on 7 (node 2): the token drawn at the root is always a
    child, so the root never ends in a bonus and both children occur about equally."""
    probs = one_hot({1: 0, 2: 0, 3: 0, 4: 0, 5: 0})
    probs[0] = 0.0
    probs[0, 5] = probs[0, 7] = 0.5
    gen = torch.Generator().manual_seed(2)
    firsts = [verify_sampling(TREE, probs, fresh_noise(gen), 0)[0][1:2] for _ in range(400)]
    assert all(f in ([1], [2]) for f in firsts)
    assert 150 < firsts.count([1]) < 250


def test_the_first_committed_token_follows_p_tilde() -> None:
    """p̃(root) = 0.2 on 5, 0.3 on 7, 0.5 on 8 (no child): the first committed token (the
    accepted child's, or the bonus) has exactly that law; 4000 draws, 5 sigma."""
    probs = one_hot({1: 0, 2: 0, 3: 0, 4: 0, 5: 0})
    probs[0] = 0.0
    probs[0, 5], probs[0, 7], probs[0, 8] = 0.2, 0.3, 0.5
    gen = torch.Generator().manual_seed(3)
    draws = 4000
    counts = {5: 0, 7: 0, 8: 0}
    for _ in range(draws):
        path, bonus = verify_sampling(TREE, probs, fresh_noise(gen), 0)
        first = int(TREE.tokens[path[1]]) if len(path) > 1 else bonus
        counts[first] += 1
    for token, p in ((5, 0.2), (7, 0.3), (8, 0.5)):
        sigma = (p * (1 - p) / draws) ** 0.5
        assert abs(counts[token] / draws - p) < 5 * sigma, counts


def test_when_no_child_is_drawn_the_bonus_is_the_drawn_token() -> None:
    """p̃(root) = 0.5 on 5 (node 1), 0.5 on 2 (no child): whenever 5 is not drawn the bonus
    is 2, never 5."""
    probs = one_hot({1: 0, 2: 0, 3: 0, 4: 0, 5: 0})
    probs[0] = 0.0
    probs[0, 5] = probs[0, 2] = 0.5
    gen = torch.Generator().manual_seed(4)
    outcomes = [verify_sampling(TREE, probs, fresh_noise(gen), 0) for _ in range(200)]
    assert {(tuple(p[:2]), b if len(p) == 1 else None) for p, b in outcomes} == {
        ((0, 1), None), ((0,), 2)
    }
