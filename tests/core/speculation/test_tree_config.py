"""TreeConfig.total_tokens: drafted nodes (root not counted), capped by the candidate pool a
dynamic tree really reranks, top_k + (depth - 1)·top_k² (EAGLE's k + D·k²)."""

from __future__ import annotations

import pytest
import torch

from bench.harness.tiny_models import random_drafter, tiny_target
from core.config import TreeConfig, candidate_pool_size
from core.speculation.drafting import grow_tree
from core.speculation.tree import DraftTree


def _grown_tree(cfg: TreeConfig) -> DraftTree:
    """A tree grown by a random drafter after a 5-pair catch-up."""
    target = tiny_target()
    drafter = random_drafter(target, draft_vocab=48)
    g = torch.Generator().manual_seed(0)
    feats, tokens = (torch.randn(1, 5, 3 * 32, generator=g),
                     torch.randint(0, 64, (1, 5), generator=g))
    h, kv = drafter(feats, tokens, torch.arange(5)[None])
    return grow_tree(drafter, kv, h[0, -1], root=3, position=5, cfg=cfg)


def test_candidate_pool_counts_every_reranked_child() -> None:
    assert candidate_pool_size(4, 5) == 4 + 4 * 16
    assert candidate_pool_size(1, 6) == 6  # a chain
    # EAGLE-3's GPU tree (top_k 10, EAGLE depth 7 = 8 levels here): 10 + 7·100 candidates.
    assert candidate_pool_size(10, 8) == 710


@pytest.mark.parametrize(("top_k", "depth", "asked", "kept"), [
    (4, 5, 30, 30),  # used to be cut to top_k·depth = 20
    (10, 8, 59, 59),  # EAGLE-3's total_token 60 counts the root
    (2, 3, 100, 10),  # more than the pool: every candidate
    (1, 4, 9, 4),  # a chain never has more than depth nodes
])
def test_total_tokens_is_capped_by_the_candidate_pool(top_k: int, depth: int, asked: int,
                                                      kept: int) -> None:
    assert TreeConfig(top_k=top_k, depth=depth, total_tokens=asked).total_tokens == kept


@pytest.mark.parametrize("cfg", [
    TreeConfig(top_k=4, depth=5, total_tokens=30),
    TreeConfig(top_k=2, depth=3, total_tokens=100),
])
def test_grown_tree_holds_total_tokens_drafted_nodes_plus_the_root(cfg: TreeConfig) -> None:
    tree = _grown_tree(cfg)
    assert tree.num_drafted == cfg.total_tokens
    # what the target verifies
    assert tree.tokens.numel() == tree.mask.shape[0] == cfg.total_tokens + 1
