"""The build trains in fp32 on CPU (emulated bf16 is 30x slower there) and in bf16 on CUDA."""

from __future__ import annotations

import contextlib

import pytest
import torch

from demo.precision import train_autocast


def test_cpu_runs_in_fp32() -> None:
    assert isinstance(train_autocast("cpu"), contextlib.nullcontext)
    with train_autocast("cpu"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_cuda_autocasts_to_bf16() -> None:
    ctx = train_autocast("cuda")
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
