"""Pure draft-tree helpers: candidate selection, parents, masks, depths, children order.

A draft tree has node 0 = the root (last committed token, not yet in the target KV cache)
and nodes 1..N = drafted tokens, ordered so that every parent precedes its children and
siblings appear in the drafter's score order (what sampling verification tries first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class DraftTree:
    tokens: Tensor  # [N+1] target-vocab ids, tokens[0] = root
    parents: Tensor  # [N+1] parent node index, -1 for the root
    depths: Tensor  # [N+1] root 0
    mask: Tensor  # [N+1, N+1] bool, mask[i, j] = j is i or an ancestor of i
    children: tuple[tuple[int, ...], ...]  # children[i] in try order

    @property
    def num_drafted(self) -> int:
        return int(self.tokens.numel()) - 1


def select_candidates(scores: Tensor, parents: Tensor, total: int) -> list[int]:
    """Top-`total` candidates by cumulative log-prob, closed under ancestry, sorted ascending.

    scores [M], parents [M] (flat candidate index of the parent, -1 = root). Scores never
    increase along a path, so the top set is closed except for exact ties; missing ancestors
    are added so the tree is always valid.
    """
    m = scores.numel()
    if m <= total:  # every candidate kept (a model-free member's small trees, mostly)
        return list(range(m))
    top = torch.topk(scores, min(total, m)).indices.tolist()
    chosen = set(top)
    par = parents.tolist()
    for idx in top:
        p = par[idx]
        while p >= 0 and p not in chosen:
            chosen.add(p)
            p = par[p]
    return sorted(chosen)


def build_tree(root: int, cand_tokens: Tensor, cand_parents: Tensor,
               selected: list[int]) -> DraftTree:
    """Tree from selected flat candidates (sorted ascending; parents precede children)."""
    node_of = {flat: i + 1 for i, flat in enumerate(selected)}
    n = len(selected) + 1
    tokens = torch.empty(n, dtype=torch.long)
    parents = torch.full((n,), -1, dtype=torch.long)
    tokens[0] = root
    par_list = cand_parents.tolist()
    tok_list = cand_tokens.tolist()
    for flat, node in node_of.items():
        tokens[node] = tok_list[flat]
        p = par_list[flat]
        parents[node] = 0 if p < 0 else node_of[p]
    return tree_from_parents(tokens, parents)


def tree_from_parents(tokens: Tensor, parents: Tensor) -> DraftTree:
    n = tokens.numel()
    mask = torch.eye(n, dtype=torch.bool)
    depths = torch.zeros(n, dtype=torch.long)
    kids: list[list[int]] = [[] for _ in range(n)]
    par = parents.tolist()
    for i in range(1, n):
        p = par[i]
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}: parents must precede children")
        mask[i] |= mask[p]
        depths[i] = depths[p] + 1
        kids[p].append(i)
    return DraftTree(tokens, parents, depths, mask, tuple(tuple(c) for c in kids))


def merge_trees(first: DraftTree, second: DraftTree) -> DraftTree:
    """The union of two trees from the same root: `first`'s nodes, then `second`'s whose path
    `first` lacks (a path both hold is one node, so no two siblings share a token), so every
    node's children are tried in `first`'s order, then `second`'s."""
    if int(first.tokens[0]) != int(second.tokens[0]):
        raise ValueError("merged trees must share their root")
    toks, pars = first.tokens.tolist(), first.parents.tolist()
    node = {(pars[i], toks[i]): i for i in range(1, len(toks))}  # (parent, token) -> node
    into = [0]  # second's node -> the merged tree's
    for tok, par in zip(second.tokens.tolist()[1:], second.parents.tolist()[1:], strict=True):
        key = (into[par], tok)
        if key not in node:
            node[key] = len(toks)
            toks.append(tok)
            pars.append(into[par])
        into.append(node[key])
    if len(toks) == first.tokens.numel():
        return first
    return tree_from_parents(torch.tensor(toks, dtype=torch.long),
                             torch.tensor(pars, dtype=torch.long))


def chain_tree(tokens: list[int]) -> DraftTree:
    """A chain root -> t1 -> t2 ... (used for plain decoding, N = len(tokens) - 1)."""
    t = torch.tensor(tokens, dtype=torch.long)
    parents = torch.arange(-1, t.numel() - 1, dtype=torch.long)
    return tree_from_parents(t, parents)
