"""`auto` dtype: bf16 only where the CPU computes it natively; never fp16 for SmolLM2."""

from __future__ import annotations

import pytest
import torch

from core import precision
from demo.precision import target_dtype


def test_auto_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.auto_dtype("cpu") == "bfloat16" and target_dtype("auto") == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.auto_dtype("cpu") == "float32" and target_dtype("auto") == torch.float32


def test_explicit_dtypes_and_fp16_refused() -> None:
    assert target_dtype("float32") == torch.float32
    with pytest.raises(ValueError, match="unsupported"):
        target_dtype("float16")


def test_the_cpu_flag_is_read_from_cpuinfo() -> None:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        expected = " avx512_bf16" in f.read()
    assert precision.cpu_has_native_bf16() == expected
