"""Pure penalties and logit bias over the nodes of a draft tree.

OpenAI's `presence_penalty` and `frequency_penalty` and the `repetition_penalty` extension
depend on the text before the position being scored, so in a draft tree each node needs the
counts of its *own* path: node i at depth d sees the committed tokens plus the d draft tokens
from the root down to i (the root itself is already committed). Scoring every node with the
root's counts would verify against a distribution the plain decoder never uses, and the
output would no longer be lossless with respect to the penalised target.

Semantics and order follow vLLM's sampler (which follows OpenAI and Hugging Face):
  1. logit_bias:          l[t] += bias[t]
  2. repetition_penalty:  for t in prompt ∪ output: l[t] /= r if l[t] > 0 else l[t] *= r
  3. frequency_penalty:   l[t] -= f · count_output(t)
  4. presence_penalty:    l[t] -= p · [count_output(t) > 0]
then temperature, top-k and top-p (core/speculation/sampling.py). "Output" is every token generated
in this completion so far, so the prompt counts only for the repetition penalty.
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.config import Penalties


def token_counts(tokens: list[int], vocab: int, device: torch.device | str = "cpu") -> Tensor:
    """[V] float occurrences of each token id in `tokens`."""
    ids = torch.tensor(tokens, dtype=torch.long, device=device)
    return torch.bincount(ids, minlength=vocab)[:vocab].float()


def path_counts(base: Tensor, tokens: Tensor, mask: Tensor) -> Tensor:
    """[R, V] counts at tree nodes: `base` [V] (the committed output) plus the draft tokens on
    the node's path. tokens [N+1] (tokens[0] = the committed root, not counted again); mask
    [R, N+1]: rows of the tree's mask (core/speculation/tree.DraftTree), mask[i, j] = j is the row's
    node or an ancestor of it (all N+1 rows: every node)."""
    n = mask.shape[0]
    counts = base.expand(n, base.numel()).clone()
    # (node i, path member j >= 1) pairs: O(N · depth) scatter instead of an [N, N] × [N, V] matmul
    rows, cols = mask[:, 1:].to(counts.device).nonzero(as_tuple=True)
    drafted = tokens[1:].to(counts.device)[cols]
    counts.index_put_((rows, drafted), torch.ones_like(rows, dtype=counts.dtype), accumulate=True)
    return counts


def apply_penalties(logits: Tensor, output_counts: Tensor, prompt_seen: Tensor,
                    penalties: Penalties) -> Tensor:
    """Penalised logits [R, V] (float32). output_counts [R, V]: each row's generated-token
    counts; prompt_seen [V] bool: tokens in the prompt (repetition penalty only)."""
    x = logits.float().clone()
    vocab = x.shape[-1]
    if penalties.logit_bias:
        ids = torch.tensor([t for t, _ in penalties.logit_bias], dtype=torch.long, device=x.device)
        if int(ids.max()) >= vocab or int(ids.min()) < 0:
            raise ValueError(f"logit_bias token ids must be in [0, {vocab})")
        bias = torch.tensor([b for _, b in penalties.logit_bias], dtype=x.dtype, device=x.device)
        x[:, ids] += bias
    if penalties.repetition != 1.0:
        r = penalties.repetition
        seen = prompt_seen.to(x.device) | (output_counts > 0)
        x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    if penalties.frequency:
        x = x - penalties.frequency * output_counts
    if penalties.presence:
        x = x - penalties.presence * (output_counts > 0).to(x.dtype)
    return x
