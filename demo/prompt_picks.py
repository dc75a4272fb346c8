"""Which training prompts a build uses: a seeded choice shared by the rollouts
(demo/pipeline.py) and the static router (demo/router.py)."""

from __future__ import annotations

import torch

from demo.records import Record


def pick(records: list[Record], n: int, seed: int) -> list[Record]:
    """n records chosen by a seeded permutation (spreads over topics; ids are sorted by source)."""
    order = torch.randperm(len(records), generator=torch.Generator().manual_seed(seed)).tolist()
    return [records[i] for i in order[:n]]
