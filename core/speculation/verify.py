"""Pure verification of a draft tree against target outputs. Both rules are exactly lossless:

greedy:   walk from the root while the target argmax is a child; the argmax at the last
          accepted node is the bonus token. Output = plain greedy decoding, token for token.
sampling: at each accepted node try its children in order; accept child c with probability
          p̃(c) (p̃ renormalised after each rejection, rejected children zeroed); if every child
          is rejected, sample the bonus from the residual. By induction each committed token
          is distributed exactly as p̃ given the prefix (multi-candidate recursive rejection
          with deterministic proposals, as in EAGLE/SpecInfer).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from core.speculation.tree import DraftTree


class NodeRows(Protocol):
    """Row `node` [V] of the target's logits (greedy) or p̃ (sampling) at a tree node: a
    [N+1, V] tensor, or core/decoding/node_logits.NodeLogits, which computes a row when first
    read."""

    def __getitem__(self, node: int) -> Tensor: ...


def verify_greedy(tree: DraftTree, logits: NodeRows) -> tuple[list[int], int]:
    """Returns (accepted node path starting at the root, bonus token). Reads the rows of the
    path's nodes only."""
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        want = int(logits[node].argmax())
        nxt = next((c for c in tree.children[node] if tokens[c] == want), None)
        if nxt is None:
            return path, want
        node = nxt
        path.append(node)


def verify_sampling(tree: DraftTree, probs: NodeRows,
                    generator: torch.Generator | None) -> tuple[list[int], int]:
    """probs[node] = p̃ at a node, on any device: only the rows of the nodes visited are read
    and copied to the CPU, where the request's generator lives. Returns (accepted node path,
    bonus token)."""
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        p = probs[node].to("cpu", copy=True)
        accepted = None
        for child in tree.children[node]:
            tok = tokens[child]
            mass = float(p.sum())
            if mass <= 0:
                break
            r = float(torch.rand((), generator=generator))
            if r * mass < float(p[tok]):
                accepted = child
                break
            p[tok] = 0.0
        if accepted is None:
            if float(p.sum()) <= 0:  # numerically exhausted: fall back to p̃ itself
                p = probs[node].cpu()
            return path, int(torch.multinomial(p / p.sum(), 1, generator=generator).item())
        node = accepted
        path.append(node)
