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


def sample(probs: Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())
