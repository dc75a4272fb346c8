"""Where benchmarks read and write: the repository, bench/results/ and bench/data/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
DATA = REPO / "bench" / "data"
