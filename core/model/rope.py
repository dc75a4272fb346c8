"""Rotary position embedding of the EAGLE-3 drafter: the cos/sin tables of a `RopeConfig` (which
RoPE a config.json asks for, and the types refused: eagle3_format/rope_config.py).

Types: default, linear, dynamic (NTK), yarn, llama3, computed as `transformers.modeling_rope_utils`
does (tests compare against it). `dynamic` depends on the sequence length: here it is a function of
each call's largest position, which is what a freshly built transformers rotary embedding computes
(the transformers module also remembers the largest length it has seen; the drafter's calls are
short and in increasing order).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from eagle3_format.rope_config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int, seq_len: int,
                        device: torch.device | None = None) -> tuple[Tensor, float]:
    """(inv_freq [head_dim/2] float32, attention scaling of cos/sin) for sequences of `seq_len`."""
    base = rope.theta
    if rope.rope_type == "dynamic":  # NTK: a larger base once the sequence outgrows the table
        factor, max_pos = float(rope.get("factor")), rope.max_position_embeddings
        seq = max(seq_len, max_pos)
        base = base * ((factor * seq / max_pos) - (factor - 1)) ** (head_dim / (head_dim - 2))
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    if rope.rope_type == "linear":  # position interpolation: positions / factor
        return inv / float(rope.get("factor")), 1.0
    if rope.rope_type == "llama3":
        return _llama3(inv, rope), 1.0
    if rope.rope_type == "yarn":
        return _yarn(inv, rope, head_dim)
    return inv, 1.0


def _llama3(inv: Tensor, rope: RopeConfig) -> Tensor:
    """Llama 3.1: long wavelengths divided by factor, short ones kept, a linear blend between."""
    factor, low, high = (float(rope.get(k))
                         for k in ("factor", "low_freq_factor", "high_freq_factor"))
    context = float(rope.get("original_max_position_embeddings"))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > context / low, inv / factor, inv)
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


def _yarn(inv: Tensor, rope: RopeConfig, head_dim: int) -> tuple[Tensor, float]:
    """YaRN: interpolate low frequencies by factor, keep high ones, ramp between the dimensions
    that turn beta_slow and beta_fast times over the original context; scale cos/sin by mscale."""
    original = int(rope.get("original_max_position_embeddings"))
    factor = rope.get("factor")
    factor = float(factor) if factor is not None else rope.max_position_embeddings / original
    attention = rope.get("attention_factor")
    if attention is None:
        mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")
        attention = (_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
                     if mscale and mscale_all else _yarn_mscale(factor, 1.0))
    beta_fast, beta_slow = float(rope.get("beta_fast") or 32), float(rope.get("beta_slow") or 1)

    def dim_of(rotations: float) -> float:  # the dimension that turns `rotations` times
        return (head_dim * math.log(original / (rotations * 2 * math.pi))
                / (2 * math.log(rope.theta)))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    ramp = ((torch.arange(head_dim // 2, device=inv.device).float() - low)
            / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (original frequency), 0: interpolate (divided by factor)
    return inv / factor * (1 - keep) + inv * keep, float(attention)


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_cos_sin(position_ids: Tensor, head_dim: int, rope: RopeConfig | float, dtype: torch.dtype
                 ) -> tuple[Tensor, Tensor]:
    """cos/sin [..., T, head_dim] for integer positions (Llama's half-rotation layout). A float
    `rope` is a plain RoPE of that base."""
    if not isinstance(rope, RopeConfig):
        rope = RopeConfig(theta=float(rope))
    # Only dynamic NTK needs the length (and reading it syncs a GPU).
    seq_len = (int(position_ids.max()) + 1 if rope.rope_type == "dynamic" and position_ids.numel()
               else 0)
    inv, scale = inverse_frequencies(rope, head_dim, seq_len, position_ids.device)
    ang = position_ids.float().unsqueeze(-1) * inv  # [..., T, hd/2]
    emb = torch.cat([ang, ang], dim=-1)
    return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)
