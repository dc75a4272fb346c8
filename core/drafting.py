"""Grow an EAGLE-2/3 dynamic draft tree with one drafter (beam-style rerank per level, then
the top `total_tokens` candidates by cumulative log-probability)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from core.config import TreeConfig
from core.drafter_pool import KV
from core.eagle3 import Eagle3Drafter
from core.tree import DraftTree, build_tree, select_candidates

# Target-vocabulary masks [len(paths), V] of what a grammar allows after each path of draft
# tokens (core/grammar.TokenMatcher.masks_after).
AllowedFn = Callable[[Sequence[Sequence[int]]], Tensor]


@torch.no_grad()
def grow_tree(drafter: Eagle3Drafter, kv: KV, h_last: Tensor, root: int, position: int,
              cfg: TreeConfig, allowed: AllowedFn | None = None) -> DraftTree:
    """kv: the drafter's committed cache [1,nkv,S,hd] (S = position); h_last [H]: pre-norm
    output of its last pair (predicts the token after `root`). Level-1 nodes sit at drafter
    position `position`, level L nodes at position + L - 1 (EAGLE's convention). With
    `allowed` (a grammar), each node's children are drawn from what the grammar allows after
    its path, so no tree slot goes to a token the constrained target gives probability 0."""
    k, dev = cfg.top_k, h_last.device
    logp = torch.log_softmax(drafter.logits(h_last.view(1, -1)).float(), dim=-1)[0]
    if allowed is not None:
        logp = _grammar_masked(logp[None], drafter, allowed([[]]))[0]
    top = torch.topk(logp, min(k, logp.numel()))
    scores, tokens = [top.values], [drafter.draft_to_target(top.indices)]
    parents = [torch.full((top.indices.numel(),), -1, dtype=torch.long, device=dev)]
    frontier_flat = torch.arange(top.indices.numel(), device=dev)  # flat ids of expanded nodes
    frontier_h = h_last.view(1, -1).expand(top.indices.numel(), -1)
    frontier_tok, frontier_score = tokens[0], top.values
    frontier_anc = torch.zeros(top.indices.numel(), 0, dtype=torch.bool, device=dev)  # ancestors in tree KV
    tree_k, tree_v = kv[0][:, :, :0], kv[1][:, :, :0]
    offset = top.indices.numel()
    frontier_paths = [[t] for t in tokens[0].tolist()]
    for level in range(1, cfg.depth):
        m = frontier_tok.numel()
        mask = _expand_mask(kv[0].shape[2], frontier_anc, h_last.dtype)
        past = (torch.cat([kv[0], tree_k], 2), torch.cat([kv[1], tree_v], 2))
        pos = torch.full((1, m), position + level - 1, dtype=torch.long, device=dev)
        h, (k_all, v_all) = drafter(frontier_h.unsqueeze(0), frontier_tok.view(1, m), pos, past, mask)
        tree_k, tree_v = k_all[:, :, kv[0].shape[2]:], v_all[:, :, kv[1].shape[2]:]
        child_logp = torch.log_softmax(drafter.logits(h[0]).float(), dim=-1)  # [m, Vd]
        if allowed is not None:
            child_logp = _grammar_masked(child_logp, drafter, allowed(frontier_paths))
        ctop = torch.topk(child_logp, min(k, child_logp.shape[-1]), dim=-1)
        cum = frontier_score[:, None] + ctop.values  # [m, k]
        kk = ctop.indices.shape[1]
        scores.append(cum.flatten())
        tokens.append(drafter.draft_to_target(ctop.indices).flatten())
        parents.append(frontier_flat.repeat_interleave(kk))
        best = torch.topk(cum.flatten(), min(k, cum.numel())).indices
        par = best // kk
        own = torch.eye(m, dtype=torch.bool, device=dev)[par]  # each new node's parent column in this level
        frontier_anc = torch.cat([frontier_anc[par], own], dim=1)
        frontier_flat = offset + best
        frontier_h, frontier_tok, frontier_score = h[0][par], tokens[-1][best], cum.flatten()[best]
        frontier_paths = [frontier_paths[p] + [t] for p, t in zip(par.tolist(), frontier_tok.tolist(), strict=True)]
        offset += cum.numel()
    all_scores, all_tokens, all_parents = torch.cat(scores).cpu(), torch.cat(tokens).cpu(), torch.cat(parents).cpu()
    # Candidates a grammar forbids score -inf; only finite ones (closed under ancestry) enter.
    total = min(cfg.total_tokens, int(torch.isfinite(all_scores).sum()))
    selected = select_candidates(all_scores, all_parents, total)
    return build_tree(root, all_tokens, all_parents, selected)


def _expand_mask(committed: int, ancestors: Tensor, dtype: torch.dtype) -> Tensor:
    """[1,1,m,committed+tree+m]: all committed keys, each node's ancestors, and itself."""
    m, dev = ancestors.shape[0], ancestors.device
    allowed = torch.cat([torch.ones(m, committed, dtype=torch.bool, device=dev), ancestors,
                         torch.eye(m, dtype=torch.bool, device=dev)], 1)
    return torch.zeros(allowed.shape, dtype=dtype, device=dev).masked_fill(~allowed, float("-inf"))[None, None]


def _grammar_masked(logp: Tensor, drafter: Eagle3Drafter, allowed_target: Tensor) -> Tensor:
    """Draft log-probs [m, Vd] with the tokens the grammar forbids (target mask [m, V]) at -inf."""
    ids = drafter.draft_to_target(torch.arange(logp.shape[-1], device=logp.device))
    allowed_draft = allowed_target.to(logp.device)[:, ids]
    return logp.masked_fill(~allowed_draft, float("-inf"))
