"""A model-free member's draft tree: its one-step guess iterated along each branch (base.py),
grown as an EAGLE tree is (`propose`), and the same tree as ranks (`rank_tree`), which the
evaluation judges exactly (core/selection/feedback.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from core.selection.feedback import RankTree
from core.speculation.model_free.base import Guess, Lookup, ModelFreeDrafter
from core.speculation.tree import DraftTree, build_tree, select_candidates

# Target-vocabulary masks [len(paths), V] of what a grammar allows after each path of draft
# tokens (core/speculation/grammar.TokenMatcher.masks_after).
AllowedFn = Callable[[Sequence[Sequence[int]]], Tensor]


@dataclass
class _Grown:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # flat index of the parent, -1 the root
    scores: list[float] = field(default_factory=list)  # cumulative log-score
    ranks: list[tuple[int, ...]] = field(default_factory=list)  # rank path from the root
    selected: list[int] = field(default_factory=list)  # flat indices the tree keeps


def _grow(drafter: ModelFreeDrafter, lookup: Lookup, top_k: int, total_tokens: int,
          allowed: AllowedFn | None, max_depth: int | None) -> _Grown:
    """The candidates of the member's tree and the ones it keeps (see `propose`)."""
    g = _Grown()
    paths: list[tuple[int, ...]] = []
    frontier: list[int] = [-1]  # flat indices of the nodes to expand; -1 = the root
    depth = drafter.max_depth if max_depth is None else min(max_depth, drafter.max_depth)
    for _ in range(depth):
        grown: list[int] = []
        for node in frontier:
            path = paths[node] if node >= 0 else ()
            base = g.scores[node] if node >= 0 else 0.0
            ranks = g.ranks[node] if node >= 0 else ()
            for rank, tok, lp in _allowed(lookup.guess(path), path, top_k, allowed):
                g.tokens.append(tok)
                g.parents.append(node)
                g.scores.append(base + lp)
                g.ranks.append((*ranks, rank))
                paths.append((*path, tok))
                grown.append(len(g.tokens) - 1)
        frontier = sorted(grown, key=lambda j: -g.scores[j])[:top_k]
        if not frontier:
            break
    if g.tokens:
        g.selected = select_candidates(torch.tensor(g.scores, dtype=torch.float64),
                                       torch.tensor(g.parents, dtype=torch.long), total_tokens)
    return g


def propose(drafter: ModelFreeDrafter, lookup: Lookup, root: int, top_k: int,
            total_tokens: int, allowed: AllowedFn | None = None,
            max_depth: int | None = None) -> DraftTree:
    """The member's draft tree from the root: its guess iterated along each branch (base.py),
    grown as an EAGLE tree is (core/speculation/drafting.py): the top_k best nodes of a level by
    cumulative log-score get children, and the tree keeps the total_tokens best nodes.
    With `allowed` (a grammar), candidates it forbids are dropped; `max_depth` caps the
    drafter's own depth."""
    g = _grow(drafter, lookup, top_k, total_tokens, allowed, max_depth)
    return build_tree(root, torch.tensor(g.tokens, dtype=torch.long),
                      torch.tensor(g.parents, dtype=torch.long), g.selected)


def rank_tree(drafter: ModelFreeDrafter, lookup: Lookup) -> RankTree:
    """The tree `propose` would draft from the lookup's last token, as a RankTree: what the
    evaluation needs to judge it exactly (core/selection/feedback.py), with no tie or cut
    modelled."""
    g = _grow(drafter, lookup, drafter.top_k, drafter.total_tokens, None, None)
    kids: dict[tuple[int, ...], set[int]] = {}
    for flat in g.selected:
        kids.setdefault(g.ranks[flat][:-1], set()).add(g.ranks[flat][-1])
    return {path: frozenset(r) for path, r in kids.items()}


def _allowed(guess: Guess, path: tuple[int, ...], top_k: int,
             allowed: AllowedFn | None) -> list[tuple[int, int, float]]:
    """(rank, token, log-score) of the guess's first top_k candidates a grammar allows."""
    triples = [(r, t, lp) for r, (t, lp) in enumerate(zip(guess.ids, guess.logp, strict=True))]
    triples = triples[:top_k]
    if allowed is None or not triples:
        return triples
    mask = allowed([list(path)])[0]
    return [(r, t, lp) for r, t, lp in triples if bool(mask[t])]
