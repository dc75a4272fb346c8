"""Grow EAGLE-2/3 dynamic draft trees with one drafter (beam-style rerank per level, then the
top `total_tokens` candidates by cumulative log-probability), for several requests at once.

Every request's tree has the same shape per level (top_k frontier nodes, top_k children each),
so the rows of a batch (requests that chose the same drafter) run each level's dense layers
and lm_head together, [B, top_k] tokens in one pass. Attention is per row over the request's
own drafter cache: the tree's K/V are written in place into the scratch entries past the
cache's committed length (core/model/kv_buffer.py), so no level copies the committed cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from core.config import TreeConfig
from core.model.eagle3 import Attend, Eagle3Drafter, attention
from core.model.kv_buffer import KV, KVBuffer
from core.speculation.tree import DraftTree, build_tree, select_candidates

# Target-vocabulary masks [len(paths), V] of what a grammar allows after each path of draft
# tokens (core/speculation/grammar.TokenMatcher.masks_after).
AllowedFn = Callable[[Sequence[Sequence[int]]], Tensor]


@dataclass
class DraftRow:
    """One request's input to a batched draft."""

    keys: Tensor  # [1, nkv, capacity, hd] view of the drafter's cache: `length` committed
    values: Tensor  # entries, then at least tree_scratch(cfg) free ones
    length: int
    h_last: Tensor  # [H] pre-norm output of the drafter's last pair (predicts the token after root)
    root: int
    position: int  # level-1 nodes sit at this drafter position, level L at position + L - 1
    allowed: AllowedFn | None = None  # a grammar: children drawn only from what it allows


def tree_scratch(cfg: TreeConfig) -> int:
    """Cache entries a tree writes past the committed ones: top_k frontier nodes per level
    below the first."""
    return (cfg.depth - 1) * cfg.top_k


@torch.no_grad()
def grow_tree(drafter: Eagle3Drafter, kv: KV, h_last: Tensor, root: int, position: int,
              cfg: TreeConfig, allowed: AllowedFn | None = None) -> DraftTree:
    """One tree from a committed cache kv [1,nkv,S,hd] (copied here into a buffer with room
    for the tree; the engine passes its buffers to grow_trees directly)."""
    buf = KVBuffer.of(kv, tree_scratch(cfg))
    row = DraftRow(buf.keys, buf.values, buf.length, h_last, root, position, allowed)
    return grow_trees(drafter, [row], cfg)[0]


@torch.no_grad()
def grow_trees(drafter: Eagle3Drafter, rows: Sequence[DraftRow],
               cfg: TreeConfig) -> list[DraftTree]:
    """A tree per row. With `allowed` (a grammar), each node's children are drawn from what the
    grammar allows after its path, so no tree slot goes to a token the constrained target
    gives probability 0."""
    grow = _Growth(drafter, rows, cfg)
    for level in range(1, cfg.depth):
        grow.expand(level)
    return grow.trees()


class _Growth:
    """The candidates of a batch of trees, level by level ([B, ...] tensors, B = rows)."""

    def __init__(self, drafter: Eagle3Drafter, rows: Sequence[DraftRow], cfg: TreeConfig) -> None:
        self.drafter, self.rows, self.cfg = drafter, rows, cfg
        h_last = torch.stack([r.h_last for r in rows])  # [B, H]
        logp = torch.log_softmax(drafter.logits(h_last).float(), dim=-1)[:, None]  # [B, 1, Vd]
        top = torch.topk(self._masked(logp, [[[]] for _ in rows])[:, 0],
                         min(cfg.top_k, logp.shape[-1]))
        b, m = top.indices.shape
        dev = h_last.device
        self.scores, self.tokens = [top.values], [drafter.draft_to_target(top.indices)]
        self.parents = [torch.full((b, m), -1, dtype=torch.long, device=dev)]
        self.flat = torch.arange(m, device=dev).expand(b, m)  # flat candidate ids of the frontier
        self.h = h_last[:, None].expand(b, m, -1)
        self.tok, self.score = self.tokens[0], top.values
        # ancestors among written nodes
        self.anc = torch.zeros(b, m, 0, dtype=torch.bool, device=dev)
        self.paths = ([[[t] for t in row] for row in self.tokens[0].tolist()] if self._grammar
                      else [])
        self.offset, self.written = m, 0

    @property
    def _grammar(self) -> bool:
        return any(r.allowed is not None for r in self.rows)

    def expand(self, level: int) -> None:
        b, m = self.tok.shape
        pos = torch.tensor([r.position + level - 1 for r in self.rows], device=self.tok.device)
        h = self.drafter.step(self.h, self.tok, pos[:, None].expand(b, m), self._attend())
        self.written += m
        child = torch.log_softmax(self.drafter.logits(h).float(), dim=-1)  # [B, m, Vd]
        ctop = torch.topk(self._masked(child, self.paths), min(self.cfg.top_k, child.shape[-1]),
                          dim=-1)
        kk = ctop.indices.shape[-1]
        cum = (self.score[:, :, None] + ctop.values).flatten(1)  # [B, m*kk]
        self.scores.append(cum)
        self.tokens.append(self.drafter.draft_to_target(ctop.indices).flatten(1))
        self.parents.append(self.flat.repeat_interleave(kk, dim=1))
        best = torch.topk(cum, min(self.cfg.top_k, cum.shape[1]), dim=-1).indices  # [B, k]
        par = best // kk
        # each new node's parent column
        own = torch.eye(m, dtype=torch.bool, device=par.device)[par]
        self.anc = torch.cat([_take(self.anc, par), own], dim=2)
        self.flat = self.offset + best
        self.h, self.tok, self.score = (_take(h, par), self.tokens[-1].gather(1, best),
                                        cum.gather(1, best))
        if self._grammar:
            self.paths = [[paths[p] + [t] for p, t in zip(pr, tr, strict=True)]
                          for paths, pr, tr in zip(self.paths, par.tolist(), self.tok.tolist(),
                                                   strict=True)]
        self.offset += cum.shape[1]

    def _attend(self) -> Attend:
        """Attention of the frontier nodes over each row's committed cache, the tree nodes
        written so far that are their ancestors, and themselves; writes their K/V in place."""
        rows, anc, written = self.rows, self.anc, self.written

        def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            m, outs = q.shape[2], []
            for b, row in enumerate(rows):
                lo, hi = row.length + written, row.length + written + m
                row.keys[:, :, lo:hi], row.values[:, :, lo:hi] = k[b : b + 1], v[b : b + 1]
                seen = torch.cat([torch.ones(m, row.length, dtype=torch.bool, device=q.device),
                                  anc[b], torch.eye(m, dtype=torch.bool, device=q.device)], dim=1)
                outs.append(attention(q[b : b + 1], row.keys[:, :, :hi], row.values[:, :, :hi],
                                      seen[None, None]))
            return torch.cat(outs)

        return attend

    def _masked(self, logp: Tensor, paths: list[list[list[int]]]) -> Tensor:
        """Draft log-probs [B, m, Vd] with what each row's grammar forbids after each path
        at -inf."""
        if not self._grammar:
            return logp
        ids = self.drafter.draft_to_target(torch.arange(logp.shape[-1], device=logp.device))
        out = logp.clone()
        for b, row in enumerate(self.rows):
            if row.allowed is not None:
                allowed_draft = row.allowed(paths[b]).to(logp.device)[:, ids]
                out[b] = logp[b].masked_fill(~allowed_draft, float("-inf"))
        return out

    def trees(self) -> list[DraftTree]:
        scores, tokens = torch.cat(self.scores, dim=1).cpu(), torch.cat(self.tokens, dim=1).cpu()
        parents = torch.cat(self.parents, dim=1).cpu()
        out = []
        for b, row in enumerate(self.rows):
            # Candidates a grammar forbids score -inf; only finite ones (closed under
            # ancestry) enter.
            total = min(self.cfg.total_tokens, int(torch.isfinite(scores[b]).sum()))
            selected = select_candidates(scores[b], parents[b], total)
            out.append(build_tree(row.root, tokens[b], parents[b], selected))
        return out


def _take(x: Tensor, idx: Tensor) -> Tensor:
    """x [B, m, ...] -> x[b, idx[b, j]] [B, k, ...]."""
    shape = (*idx.shape, *x.shape[2:])
    return x.gather(1, idx.reshape(*idx.shape, *([1] * (x.dim() - 2))).expand(shape))
