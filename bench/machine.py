"""The line a CPU benchmark writes about the machine it ran on (its figures depend on it)."""

from __future__ import annotations

import os
import platform

from core.model.precision import cpu_has_native_bf16


def describe_machine() -> str:
    """e.g. 'x86_64, 2 cores visible, native bf16: True'."""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, "
            f"native bf16: {cpu_has_native_bf16()}")
