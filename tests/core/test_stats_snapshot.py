"""What crosses from the engine to another thread: every `RoundOutput` carries an immutable
snapshot of its request's statistics, which the engine's later rounds leave alone."""

from __future__ import annotations

import dataclasses

import pytest

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from core.stats import StatsSnapshot


def test_each_round_hands_out_a_frozen_snapshot_that_later_rounds_leave_alone() -> None:
    target = tiny_target(vocab=64, seed=2)
    engine = make_engine(target, {"d0": random_drafter(target, seed=0)},
                         TreeConfig(top_k=2, depth=2, total_tokens=4))  # fmt: skip
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    outs = list(engine.generate([1, 2, 3], params, "normalhedge"))
    first, last = outs[1].stats, outs[-1].stats  # outs[0] is the prefill
    assert isinstance(first, StatsSnapshot) and first is not last
    assert (first.rounds, first.drafter_per_round) == (1, ("d0",))
    assert last.rounds == len(outs) - 1 and len(last.accepted_per_round) == last.rounds
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.rounds = 0  # type: ignore[misc]
    with pytest.raises(TypeError):
        first.weights["d0"] = 0.0  # type: ignore[index]
    assert isinstance(first.accepted_per_round, tuple)
    assert (last.mean_acceptance_length
            == (last.completion_tokens - last.prefill_tokens) / last.rounds)
