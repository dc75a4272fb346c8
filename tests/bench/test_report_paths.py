"""Committed reports name files relative to the repository, never a folder of the machine that
ran them (bench.machine.repo_path)."""

from __future__ import annotations

import re
from pathlib import Path

from bench.machine import repo_path

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home|mnt|var/tmp)/")


def test_no_committed_report_names_a_machine_folder() -> None:
    reports = [p for p in (ROOT / "bench" / "results").rglob("*")
               if p.suffix in {".md", ".json"}]
    found = [str(p.relative_to(ROOT)) for p in reports if MACHINE_PATH.search(p.read_text())]
    assert not found


def test_a_path_is_written_relative_to_the_repository() -> None:
    assert repo_path(ROOT / "demo" / "pool" / "pool.json") == "demo/pool/pool.json"
    assert repo_path("/elsewhere/pool.json") == "pool.json"
