"""Pure logits processing: temperature, top-k, top-p (nucleus) -> the target distribution p̃."""

from __future__ import annotations

import torch
from torch import Tensor


def process_logits(logits: Tensor, temperature: float, top_p: float = 1.0,
                   top_k: int = 0) -> Tensor:
    """Probabilities p̃ [..., V] after temperature, top-k and top-p (top-p keeps the smallest
    prefix of the sorted distribution whose mass reaches top_p, always >= 1 token)."""
    if temperature <= 0:
        raise ValueError("process_logits is for sampling; greedy uses argmax")
    x = logits.float() / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each sorted token
        drop_sorted = before >= top_p
        # the most likely token always survives (top_p may underflow to 0)
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def log_probs(logits: Tensor) -> Tensor:
    """Log-probabilities of the raw target distribution (what `logprobs` reports)."""
    return torch.log_softmax(logits.float(), dim=-1)


class PositionNoise:
    """One sampled request's randomness, keyed by output position: the token at position i is
    argmax_v p̃_i(v) / E_i(v), with E_i(v) ~ Exp(1) independent, drawn from a generator seeded
    by (seed, i) alone (the exponential race, the Gumbel-max trick's form: it picks v with
    probability p̃_i(v), exactly).

    Why keyed by position and not a stream consumed as drawn: a stream's next number depends on
    how many the request drew before, which depends on its draft trees (how many children each
    walk tried), hence on the learner's choices, the suffix member's memory of other requests
    and the machine's timing. Keyed by position, the token sampled at i depends on p̃_i and the
    seed only: a seeded request gives the same text alone, again, among other streams, under
    any policy, and the same text as plain sampling with that seed (given the same p̃, which
    canonical numerics make bit-identical: core/model/canonical.py)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def sample(self, probs: Tensor, position: int) -> int:
        """The token at output `position` under p̃ = probs [V] (on any device)."""
        gen = torch.Generator().manual_seed(_mix(self.seed, position))
        race = torch.empty(probs.shape[-1], dtype=torch.float32).exponential_(generator=gen)
        # a draw of exactly 0 (about one a sample in a 49k vocabulary at float32's
        # resolution) would make 0/0 a NaN that argmax takes for a masked token
        race.clamp_(min=torch.finfo(torch.float32).tiny)
        return int((probs.float().cpu() / race).argmax())


def _mix(seed: int, position: int) -> int:
    """A 63-bit generator seed from (seed, position) (SplitMix64's finaliser: nearby pairs
    give unrelated seeds)."""
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (z ^ (z >> 31)) >> 1
