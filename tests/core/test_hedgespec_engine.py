"""HedgeSpec inside the engine: losslessness under every policy, forward-pass accounting with a
pool of 8, γ alignment, learning on the counterfactual feedback, hot pool changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

import core.batching.step
from bench.harness.tiny_models import (
    bigram_setup,
    bigram_target,
    copy_drafter,
    hf_greedy,
    make_engine,
    random_drafter,
)
from core.config import LEARNER_NAMES, SamplingParams, TreeConfig
from core.engine import PolicyError, SpecEngine

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)
POLICIES = ["none", *LEARNER_NAMES, "fixed:copy", "fixed:r3"]


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    return bigram_setup(TREE, randoms=7)


def evaluating(engine: SpecEngine) -> SpecEngine:
    """The same pool with every drafter evaluated under every policy (for baselines' ÂL)."""
    return SpecEngine(engine.target, dict(engine.snapshot.drafters),
                      replace(engine.config, evaluate_all=True))


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_is_lossless_and_counts_forwards(setup, policy: str) -> None:  # type: ignore[no-untyped-def]
    target, engine = setup
    for prompt in ([1], [4, 9, 2], [30, 31, 0, 5, 7]):
        before = engine.target.forward_count
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=40, ignore_eos=True),
                                         policy)
        assert ids == hf_greedy(target, prompt, 40)
        passes = stats.rounds + stats.plain_rounds + 1  # policy none: every round is plain
        assert engine.target.forward_count - before == passes == stats.target_forwards
        assert len(stats.drafter_ids) == (0 if policy == "none" else 8)


def test_first_position_gamma_matches_the_realised_first_acceptance(setup) -> None:  # type: ignore[no-untyped-def]
    """Greedy: ÂL_chosen >= 2 iff γ_chosen(s) = 1 iff the target argmax is among the level-1
    drafts; the round's realised length >= 2 iff the first draft level was accepted. An
    off-by-one in the γ positions breaks this equivalence."""
    engine = evaluating(setup[1])
    checked = 0
    for policy in ("normalhedge", "fixed:r0", "exp3spec"):
        _, stats = engine.generate_ids([2, 3], SamplingParams(max_new_tokens=60, ignore_eos=True),
                                       policy)
        for est, realised in stats.estimates:
            assert (est >= 2.0) == (realised >= 2)
            checked += 1
    assert checked > 20


def test_normalhedge_concentrates_on_the_copying_drafter(setup) -> None:  # type: ignore[no-untyped-def]
    _, engine = setup
    _, stats = engine.generate_ids([7], SamplingParams(max_new_tokens=120, ignore_eos=True),
                                   "normalhedge")
    assert stats.weights["copy"] > 0.9
    tail = stats.drafter_per_round[-5:]
    assert tail.count("copy") >= 4
    assert stats.mean_acceptance_length > 3.5
    # the copy drafter is the best in hindsight: its ÂL sum is the maximum and regret is small
    assert max(stats.est_len_sum, key=stats.est_len_sum.get) == "copy"
    assert 0 <= stats.regret_tokens < 0.5 * stats.rounds * (TREE.depth + 1)


def test_fixed_random_drafter_has_large_regret(setup) -> None:  # type: ignore[no-untyped-def]
    engine = evaluating(setup[1])
    _, stats = engine.generate_ids([7], SamplingParams(max_new_tokens=60, ignore_eos=True),
                                   "fixed:r1")
    # the copy drafter would have accepted ~K more per round
    assert stats.regret_tokens > 2 * stats.rounds
    assert list(stats.regret_curve) == sorted(stats.regret_curve)  # regret grows every window here


def test_unknown_policies_are_rejected(setup) -> None:  # type: ignore[no-untyped-def]
    _, engine = setup
    with pytest.raises(PolicyError, match="unknown drafter"):
        engine.add_request("x", [1], SamplingParams(), "fixed:nope")
    with pytest.raises(PolicyError, match="unknown policy"):
        engine.add_request("y", [1], SamplingParams(), "bandit9000")


def test_pool_changes_apply_to_new_requests_only() -> None:
    target, perm = bigram_target(vocab=32)
    engine = make_engine(target, {"copy": copy_drafter(target, perm),
                                  "r0": random_drafter(target, draft_vocab=24)},
                         TREE)
    engine.add_request("a", [5], SamplingParams(max_new_tokens=30, ignore_eos=True), "fixed:copy")
    engine.step()
    engine.remove_drafter("copy")
    assert engine.drafter_ids() == ["r0"]
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
    assert [t for o in outs for t in o.token_ids] == hf_greedy(target, [5], 30)[1:]
    assert set(outs[-1].stats.drafter_per_round) == {"copy"}  # the in-flight request kept its pool
    with pytest.raises(PolicyError):
        engine.add_request("b", [5], SamplingParams(), "fixed:copy")
    engine.add_loaded_drafter("copy2", copy_drafter(target, perm))
    ids, stats = engine.generate_ids([5], SamplingParams(max_new_tokens=20, ignore_eos=True),
                                     "fixed:copy2")
    assert ids == hf_greedy(target, [5], 20) and stats.mean_acceptance_length > 3


def test_a_failing_round_fails_only_its_request(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The round-robin engine (batching off); tests/core/batching/test_batching.py has the
    batched case."""
    target, base = setup
    engine = SpecEngine(base.target, dict(base.snapshot.drafters),
                        replace(base.config, batching=False))
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    engine.add_request("bad", [1, 2], params, "normalhedge")
    engine.add_request("good", [3, 4], params, "normalhedge")
    original = core.batching.step.verify_tree

    def flaky(state, *args):  # type: ignore[no-untyped-def]
        if state.request_id == "bad":
            raise RuntimeError("boom")
        return original(state, *args)

    monkeypatch.setattr(core.batching.step, "verify_tree", flaky)
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
    bad = [o for o in outs if o.request_id == "bad"]
    assert bad[-1].finish_reason == "error" and "boom" in (bad[-1].error or "")
    good = [t for o in outs if o.request_id == "good" for t in o.token_ids]
    assert good == hf_greedy(target, [3, 4], 12)
