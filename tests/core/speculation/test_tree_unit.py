"""core/speculation/tree.py: candidate selection, tree construction, masks, depths and try order."""

from __future__ import annotations

import pytest
import torch

from core.speculation.tree import build_tree, chain_tree, select_candidates, tree_from_parents

# Flat candidates of a 2-level draft: 0..2 children of the root, 3..5 children of candidate 0,
# 6 a child of candidate 1. Scores are cumulative log-probs (never increasing along a path).
SCORES = torch.tensor([-0.1, -0.5, -2.0, -0.3, -0.4, -3.0, -0.6])
PARENTS = torch.tensor([-1, -1, -1, 0, 0, 0, 1])
TOKENS = torch.tensor([10, 11, 12, 20, 21, 22, 30])


def test_select_candidates_takes_the_top_scores_sorted() -> None:
    assert select_candidates(SCORES, PARENTS, 4) == [0, 1, 3, 4]
    assert select_candidates(SCORES, PARENTS, 1) == [0]
    assert select_candidates(SCORES, PARENTS, 100) == list(range(7))


def test_select_candidates_adds_missing_ancestors() -> None:
    """A tie can rank a child above its parent; the parent is added so the tree is valid."""
    scores = torch.tensor([-1.0, -0.2, -0.1])
    parents = torch.tensor([-1, -1, 0])  # candidate 2 is candidate 0's child
    assert select_candidates(scores, parents, 2) == [0, 1, 2]


def test_select_candidates_of_nothing_is_empty() -> None:
    assert select_candidates(torch.empty(0), torch.empty(0, dtype=torch.long), 5) == []


def test_build_tree_maps_flat_candidates_to_nodes() -> None:
    tree = build_tree(7, TOKENS, PARENTS, [0, 1, 3, 4, 6])
    assert tree.tokens.tolist() == [7, 10, 11, 20, 21, 30]
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2]
    assert tree.depths.tolist() == [0, 1, 1, 2, 2, 2]
    assert tree.children == ((1, 2), (3, 4), (5,), (), (), ())
    assert tree.num_drafted == 5


def test_the_mask_is_each_node_and_its_ancestors() -> None:
    tree = build_tree(7, TOKENS, PARENTS, [0, 1, 3, 4, 6])
    ancestors = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 2, 5}}
    for i, allowed in ancestors.items():
        row = {j for j in range(6) if tree.mask[i, j]}
        assert row == allowed, (i, row)


def test_siblings_keep_their_score_order() -> None:
    """Children are tried in node order, which is the candidates' flat (score) order."""
    tree = build_tree(0, TOKENS, PARENTS, [0, 3, 4, 5])
    assert tree.children[1] == (2, 3, 4)
    assert [int(tree.tokens[c]) for c in tree.children[1]] == [20, 21, 22]


@pytest.mark.parametrize("parents", [[-1, 0, 2], [-1, 1], [-1, -1], [-1, 0, 5]])
def test_a_parent_after_its_child_is_refused(parents: list[int]) -> None:
    with pytest.raises(ValueError, match="parents must precede children"):
        tree_from_parents(torch.arange(len(parents)), torch.tensor(parents))


def test_chain_tree_is_a_single_path() -> None:
    tree = chain_tree([4, 5, 6, 7])
    assert tree.parents.tolist() == [-1, 0, 1, 2]
    assert tree.depths.tolist() == [0, 1, 2, 3]
    assert tree.children == ((1,), (2,), (3,), ())
    assert torch.equal(tree.mask, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert chain_tree([4]).num_drafted == 0
