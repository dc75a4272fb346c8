"""`auto` dtype: bf16 only where the CPU computes it natively; never fp16 for SmolLM2."""

from __future__ import annotations

import pytest
import torch

from core.model import precision
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


def test_the_cpu_flag_is_read_from_cpuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        expected = " avx512_bf16" in f.read()
    assert precision.cpu_has_native_bf16() == expected


def test_a_onednn_cap_below_bf16_means_no_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test-slow-cpu` runs the suite as an AVX2-only CPU would: oneDNN emulates bf16
    under that cap, so `auto` must not pick it (a forward would be ~30x slower)."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    assert not precision.cpu_has_native_bf16() and precision.auto_dtype("cpu") == "float32"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        expected = " avx512_bf16" in f.read()
    assert precision.cpu_has_native_bf16() == expected
