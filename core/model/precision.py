"""Which dtype `auto` means on a device: bf16 where it is computed natively, else fp32.

On a CPU bf16 only pays with native bf16 instructions (AVX512-BF16, AMX): SmolLM2-135M's
forward is 1.4-1.9x faster there (bench/results/cpu_defaults.md). Without them oneDNN emulates
bf16 and a forward is ~30x slower than fp32. fp16 is never chosen: SmolLM2's residual
activations reach ~25,000 and overflow it. Greedy token identity with plain decoding is
promised in fp32 only (low-precision results depend on the shape of each pass).
"""

from __future__ import annotations

import os

import torch

# oneDNN instruction-set caps (ONEDNN_MAX_CPU_ISA) below AVX512_CORE_BF16: under them oneDNN
# emulates bf16 as on a CPU without it. `make test-slow-cpu` sets AVX2 to run the suite as an
# AVX2-only machine would (README, "Tests").
_ISA_CAPS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                                    "AVX512_CORE", "AVX512_CORE_VNNI"})


def cpu_has_native_bf16() -> bool:
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in _ISA_CAPS_WITHOUT_BF16:
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def auto_dtype(device: str = "cpu") -> str:
    """The dtype name `auto` resolves to on `device`."""
    kind = torch.device(device).type
    if kind == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if kind == "cpu" and cpu_has_native_bf16() else "float32"
