"""bench/speed/engine_profile.py on a tiny engine: every phase and op category is measured, and the
target pass's categories add up to the pass."""

from __future__ import annotations

import pytest

from bench.harness.tiny_models import bigram_setup
from bench.speed.engine_profile import profile_case
from core.config import TreeConfig


@pytest.mark.parametrize(("mode", "streams"), [("plain", 1), ("plain", 3), ("speculative", 3)])
def test_a_profiled_step_is_split_into_its_phases_and_ops(mode: str, streams: int) -> None:
    # The categories are the pass's self times: they sum to about its wall time. A wall time
    # also holds whatever the machine did meanwhile (the suite's other worker preempting a
    # 9 ms pass read 5.5 ms of ops in 9.3 ms once), so the sum must match in one of three
    # profiles.
    misses = []
    for _ in range(3):
        _, engine = bigram_setup(TreeConfig(top_k=2, depth=3, total_tokens=6), randoms=2)
        prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
        row = profile_case(engine, prompts, mode, streams, steps=4)
        assert row.tokens >= streams  # every row commits at least one token a step
        assert (row.tokens > streams) == (mode == "speculative")  # the copying drafter is accepted
        assert row.linear > 0 and row.attention > 0 and row.python > 0 and row.other_ops > 0
        assert row.step >= row.draft + row.target_pass + row.evaluate
        assert engine.has_unfinished() is False
        parts = row.linear + row.attention + row.kv_write + row.other_ops + row.python
        if parts == pytest.approx(row.target_pass, rel=0.35):
            return
        misses.append((parts, row.target_pass))
    pytest.fail(f"the categories never summed to the pass: (sum, pass) {misses}")
