"""Learners carried across the requests of a session: permuting experts is exact, a stored
learner follows pool changes, the store is a bounded LRU of private copies, and in the engine a
session's next request starts where the last one ended, still lossless."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness.tiny_models import (
    bigram_setup,
    bigram_target,
    copy_drafter,
    hf_greedy,
    make_engine,
    random_drafter,
)
from core.config import LEARNER_NAMES, SamplingParams, SelectorConfig, TreeConfig
from core.selection.learner_sessions import LearnerSessions, adapt
from core.selection.learners import Fixed, Learner, NormalHedge, make_learner

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)


def feed(learner: Learner, rounds: list[tuple[list[float], int, float]], order: list[int]) -> None:
    """Apply the same feedback to a learner whose expert j is expert order[j] of the script."""
    for losses, arm, accepted in rounds:
        learner.update([losses[i] for i in order])
        learner.update_bandit(order.index(arm), accepted, 5)


def script(seed: int, n: int, length: int = 12) -> list[tuple[list[float], int, float]]:
    rng = np.random.default_rng(seed)
    # Bandit arms cycle, so every arm keeps a probability well above zero (EXP3 divides by it).
    return [(list(rng.uniform(0, 1, n)), t % n, float(rng.integers(1, 6))) for t in range(length)]


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_permuting_a_learner_equals_learning_in_the_permuted_order(name: str) -> None:
    order = [2, 0, 3, 1]
    rounds, later = script(0, 4), script(1, 4)
    moved, reference = make_learner(name, 4, max_len=5), make_learner(name, 4, max_len=5)
    feed(moved, rounds, [0, 1, 2, 3])
    feed(reference, rounds, order)
    moved.permute(order)
    assert moved.distribution() == pytest.approx(reference.distribution(), abs=1e-12)
    feed(moved, later, order)
    feed(reference, later, order)
    assert moved.distribution() == pytest.approx(reference.distribution(), abs=1e-12)
    assert not np.allclose(moved.distribution(), np.full(4, 0.25))  # it learned something


def test_permute_refuses_a_non_permutation_and_moves_a_fixed_choice() -> None:
    with pytest.raises(ValueError, match="permutation"):
        NormalHedge(3).permute([0, 0, 1])
    fixed = Fixed(3, index=2)
    fixed.permute([2, 0, 1])
    assert fixed.index == 0 and list(fixed.distribution()) == [1.0, 0.0, 0.0]


def test_adapt_drops_departed_drafters_adds_newcomers_at_zero_regret_and_follows_the_order(
) -> None:
    learner = NormalHedge(3)
    for _ in range(20):
        learner.update([0.1, 0.9, 0.5])  # a best, b worst
    old = dict(zip(["a", "b", "c"], learner.regrets, strict=True))
    adapted = adapt(learner, ["a", "b", "c"], ["new", "c", "a"])
    assert adapted is learner and learner.num_experts == 3
    assert list(learner.regrets) == pytest.approx([0.0, old["c"], old["a"]])
    assert learner.distribution()[2] == max(learner.distribution())  # "a" still leads
    assert adapt(NormalHedge(2), ["a", "b"], ["x", "y"]) is None  # nothing in common


def test_the_store_hands_out_private_copies_and_forgets_the_least_recently_used() -> None:
    sessions = LearnerSessions(max_sessions=2)
    learner = NormalHedge(2)
    learner.update([0.0, 1.0])
    sessions.put("s1", "normalhedge", ["a", "b"], learner, requests=1)
    warm = sessions.take("s1", "normalhedge", ["a", "b"])
    assert warm is not None and warm.requests == 1 and warm.learner is not learner
    warm.learner.update([1.0, 0.0])  # the request's own learning does not leak into the store
    again = sessions.take("s1", "normalhedge", ["a", "b"])
    assert again is not None
    assert list(again.learner.distribution()) == pytest.approx(list(learner.distribution()))
    assert sessions.take("s1", "hedge", ["a", "b"]) is None  # another learner kind: fresh
    sessions.put("s2", "normalhedge", ["a", "b"], NormalHedge(2), requests=1)
    assert sessions.take("s1", "normalhedge", ["a"]) is not None  # s1 used last
    sessions.put("s3", "normalhedge", ["a", "b"], NormalHedge(2), requests=1)
    assert len(sessions) == 2 and sessions.take("s2", "normalhedge", ["a", "b"]) is None
    off = LearnerSessions(max_sessions=0)
    off.put("s", "normalhedge", ["a", "b"], learner, requests=1)
    assert len(off) == 0


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    return bigram_setup(TREE, randoms=3)


def test_a_sessions_next_request_starts_from_where_the_last_ended(setup) -> None:  # type: ignore[no-untyped-def]
    target, engine = setup
    params = SamplingParams(max_new_tokens=60, ignore_eos=True)
    _, first = engine.generate_ids([7], params, "normalhedge", session="user-1")
    assert first.warm_start_requests == 0 and first.weights["copy"] > 0.5
    rounds = list(engine.generate([3, 4], params, "normalhedge", session="user-1"))
    second = rounds[-1].stats
    assert second.warm_start_requests == 1
    first_round = next(r.round for r in rounds if r.round is not None)
    assert first_round.weights == pytest.approx(first.weights)  # no uniform restart
    # The learner that drafts is the warm one, not only the one reported: its weight sits on the
    # copying drafter, so that drafter is played from the first round.
    assert first_round.drafter == "copy"
    ids = [t for r in rounds for t in r.token_ids]
    assert ids == hf_greedy(target, [3, 4], 60)  # the warm learner changes speed, not output
    cold = list(engine.generate([3, 4], params, "normalhedge"))
    assert cold[-1].stats.warm_start_requests == 0
    cold_start = next(r.round for r in cold if r.round is not None).weights
    assert cold_start == pytest.approx(dict.fromkeys(cold_start, 1 / len(cold_start)))  # uniform
    _, other = engine.generate_ids([3, 4], params, "normalhedge", session="user-2")
    assert other.warm_start_requests == 0
    _, third = engine.generate_ids([5], params, "auto", session="user-1")  # auto = normalhedge
    assert third.warm_start_requests == 2


def test_plain_and_fixed_policies_ignore_the_session(setup) -> None:  # type: ignore[no-untyped-def]
    _, engine = setup
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    for policy in ("none", "fixed:r0"):
        _, stats = engine.generate_ids([1], params, policy, session="fixed-only")
        assert stats.warm_start_requests == 0
    assert engine.sessions.take("fixed-only", "normalhedge", engine.snapshot.ids) is None


def test_a_session_survives_a_pool_change(setup) -> None:  # type: ignore[no-untyped-def]
    target, _ = setup
    _, perm = bigram_target(vocab=32)
    drafters = {"r0": random_drafter(target, draft_vocab=24, seed=0),
                "copy": copy_drafter(target, perm)}
    engine = make_engine(target, drafters, TREE)
    params = SamplingParams(max_new_tokens=60, ignore_eos=True)
    engine.generate_ids([7], params, "normalhedge", session="s")
    engine.add_loaded_drafter("r1", random_drafter(target, draft_vocab=24, seed=1))
    engine.remove_drafter("r0")
    rounds = list(engine.generate([2], params, "normalhedge", session="s"))
    start = next(r.round for r in rounds if r.round is not None).weights
    assert set(start) == {"copy", "r1"} and start["copy"] > start["r1"]
    assert rounds[-1].stats.warm_start_requests == 1


def test_engine_sessions_are_bounded_by_the_config() -> None:
    target, perm = bigram_target(vocab=32)
    engine = make_engine(target, {"copy": copy_drafter(target, perm)}, TREE,
                         selector=SelectorConfig(max_sessions=1))
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    for session in ("a", "b"):
        engine.generate_ids([1], params, "normalhedge", session=session)
    assert len(engine.sessions) == 1
