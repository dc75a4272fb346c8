"""Precision of the demo build's target passes (rollouts, features): `auto` as the server
resolves it (core/model/precision.py), so the drafters learn from the target as it is served.
Drafter training itself stays fp32 on the CPU."""

from __future__ import annotations

import torch

from core.model.precision import auto_dtype


def target_dtype(name: str, device: str = "cpu") -> torch.dtype:
    """`auto`, `float32` or `bfloat16` as a torch dtype (never fp16: SmolLM2 overflows it)."""
    resolved = auto_dtype(device) if name == "auto" else name
    dtype = getattr(torch, resolved, None)
    if not isinstance(dtype, torch.dtype) or dtype == torch.float16:
        raise ValueError(f"unsupported target dtype {name!r}: use auto, float32 or bfloat16")
    return dtype
