"""The rollouts file (demo/rollouts.py): each rollout records the precision that made it, which
is provenance, not part of the key, so a build in another precision reuses the file."""

from __future__ import annotations

import json
from pathlib import Path

from demo.build_config import FULL
from demo.domains import DATA_DIR, ROLLOUTS_FILE
from demo.rollouts import Rollout, Stored, save_rollouts, stored_responses
from demo.stage_cache import rollout_key

KEY = rollout_key(FULL, 0, DATA_DIR)


def test_a_rollout_keeps_its_dtype_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    rows = [Rollout("sql", "s1", 0.0, (1, 2), (5, 6, 2), 0, "torch.bfloat16"),
            Rollout("sql", "s2", 1.0, (1, 3), (7,), 1, "torch.float32")]
    save_rollouts(path, rows, KEY)
    assert "dtype" not in json.loads(path.read_text().splitlines()[0])["key"]
    assert stored_responses(path, KEY) == {("s1", 0.0): Stored((5, 6, 2), "torch.bfloat16"),
                                           ("s2", 1.0): Stored((7,), "torch.float32")}
    assert stored_responses(path, {**KEY, "seed": 1}) == {}  # another seed: stale


def test_a_file_with_the_dtype_in_its_key_gives_it_to_every_line(tmp_path: Path) -> None:
    """Files written before rollouts carried their dtype (the header key held it) still serve."""
    path = tmp_path / "rollouts.jsonl"
    header = {"key": {**KEY, "dtype": "torch.bfloat16"}}
    line = {"domain": "sql", "record_id": "s1", "temperature": 0.0, "response_ids": [4, 2],
            "rank": 0}
    path.write_text(json.dumps(header) + "\n" + json.dumps(line) + "\n")
    assert stored_responses(path, KEY) == {("s1", 0.0): Stored((4, 2), "torch.bfloat16")}


def test_the_committed_rollouts_record_their_dtype_per_line() -> None:
    stored = stored_responses(ROLLOUTS_FILE, KEY)
    assert stored and {s.dtype for s in stored.values()} <= {"torch.bfloat16", "torch.float32"}
