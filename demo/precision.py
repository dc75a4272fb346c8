"""Mixed precision for the demo build: bf16 autocast on CUDA, plain fp32 on CPU.

bf16 autocast only pays on CPUs with native bf16 (AVX512-BF16, AMX). On an AVX2-only CPU
(the 2-core machines the build is budgeted for) it is emulated: measured 30x slower than fp32
for a target training step (1.7 s vs 49 s). fp32 on every CPU also keeps a CPU build's result
independent of which bf16 instructions the machine happens to have.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch


def train_autocast(device: torch.device | str) -> AbstractContextManager[object]:
    """The autocast context for a training or feature-extraction step on `device`."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.autocast(kind, dtype=torch.bfloat16)
    return contextlib.nullcontext()
