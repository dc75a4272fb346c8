"""The seven demo domains and where their vendored data lives."""

from __future__ import annotations

from pathlib import Path

DOMAINS: tuple[str, ...] = ("python", "math", "biology", "chemistry", "medical", "news", "sql")

DATA_DIR = Path(__file__).resolve().parent / "data"
POOL_DIR = Path(__file__).resolve().parent / "pool"
DEMO_POOL = POOL_DIR / "pool.json"  # what `make serve` and the image serve


def corpus_path(domain: str, data_dir: Path = DATA_DIR) -> Path:
    """Training records (prompt/response pairs) of one domain."""
    return data_dir / "corpora" / f"{domain}.jsonl"


def eval_path(domain: str, data_dir: Path = DATA_DIR) -> Path:
    """Held-out records of one domain, disjoint from its corpus."""
    return data_dir / "eval" / f"{domain}.jsonl"


# The full build's rollouts, committed so that a drafter rebuild skips generation.
ROLLOUTS_FILE = DATA_DIR / "rollouts" / "rollouts.jsonl"
