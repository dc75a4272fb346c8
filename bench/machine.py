"""The line a CPU benchmark writes about the machine it ran on (its figures depend on it)."""

from __future__ import annotations

import os
import platform

from core.model.precision import cpu_has_native_bf16


def describe_machine() -> str:
    """e.g. 'x86_64, 2 cores visible, native bf16: True'."""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, "
            f"native bf16: {cpu_has_native_bf16()}")


def repo_path(path: object) -> str:
    """`path` as a report writes it: relative to the repository when inside it (a committed
    report names no folder of the machine that ran it), else its file name."""
    from pathlib import Path

    p = Path(str(path)).resolve()
    root = Path(__file__).resolve().parents[1]
    return str(p.relative_to(root)) if p.is_relative_to(root) else p.name
