"""Pure verification of a draft tree against target outputs. Both rules are exactly lossless:

greedy:   walk from the root while the target argmax is a child; the argmax at the last
          accepted node is the bonus token. Output = plain greedy decoding, token for token.
sampling: the same walk against a sampled token: at a node of depth d the token that follows
          it is drawn from p̃ at the node with the request's noise for output position
          start + d (core/speculation/sampling.PositionNoise); the walk goes on while that
          token is a child, and the token drawn at the last accepted node is the bonus. Each
          committed token is drawn exactly from p̃ given its prefix, with the noise of its own
          position, so the text is plain sampling's with the same noise whatever the tree.
          The acceptance is the best a lossless rule can have with deterministic proposals:
          a node's children are accepted with probability p̃(children), the total the
          recursive rejection of EAGLE/SpecInfer reaches too (a committed token must be
          distributed as p̃, so it is one of the children with exactly that probability).
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from core.speculation.sampling import PositionNoise
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


def verify_sampling(tree: DraftTree, probs: NodeRows, noise: PositionNoise,
                    start: int) -> tuple[list[int], int]:
    """probs[node] = p̃ at a node, on any device: only the rows of the nodes visited are read.
    `start`: the output position of the token after the root (the request's length). Returns
    (accepted node path, bonus token)."""
    tokens = tree.tokens.tolist()
    node, path = 0, [0]
    while True:
        want = noise.sample(probs[node], start + len(path) - 1)
        nxt = next((c for c in tree.children[node] if tokens[c] == want), None)
        if nxt is None:
            return path, want
        node = nxt
        path.append(node)
