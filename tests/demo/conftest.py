"""The real demo target, converted once per machine from its wheel (demo/smollm2.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from demo.smollm2 import provision

    return provision(progress=False)
