"""The static router baseline: TF-IDF + logistic regression over prompt token ids, and the
`router` policy that fixes the routed drafter for a whole request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.harness.tiny_models import make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from core.decoding.request import parse_policy
from core.selection.router import PromptRouter


def synthetic(n: int, seed: int) -> tuple[list[list[int]], list[str]]:
    """Class c's prompts draw most tokens from ids [10c, 10c + 10), the rest from shared ids."""
    rng = np.random.default_rng(seed)
    prompts, labels = [], []
    for i in range(n):
        c = i % 3
        own = rng.integers(10 * c, 10 * c + 10, size=6)
        shared = rng.integers(40, 64, size=10)
        prompts.append([int(t) for t in rng.permutation(np.concatenate([own, shared]))])
        labels.append(f"d{c}")
    return prompts, labels


def test_router_learns_separable_domains_and_survives_a_round_trip(tmp_path: Path) -> None:
    router = PromptRouter.fit(*synthetic(90, 0))
    test_prompts, test_labels = synthetic(60, 1)
    accuracy = np.mean([router.route(p) == lab
                        for p, lab in zip(test_prompts, test_labels, strict=True)])
    assert accuracy > 0.95
    router.save(tmp_path / "router.npz")
    again = PromptRouter.load(tmp_path / "router.npz")
    assert [again.route(p) for p in test_prompts] == [router.route(p) for p in test_prompts]
    assert router.route([999, 1000]) in router.labels, "unseen tokens only: still a label"


def test_router_policy_fixes_the_routed_drafter_for_the_request() -> None:
    target = tiny_target(vocab=64, seed=2)
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(3)}
    engine = make_engine(target, drafters, TreeConfig(top_k=2, depth=3, total_tokens=6))
    engine.router = PromptRouter.fit(*synthetic(90, 0))
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    for prompt, label in zip(*synthetic(6, 3), strict=True):
        ids, stats = engine.generate_ids(prompt, params, policy="router")
        fixed_ids, fixed_stats = engine.generate_ids(prompt, params, policy=f"fixed:{label}")
        assert stats.policy == "router"
        assert (ids, stats.accepted_per_round) == (fixed_ids, fixed_stats.accepted_per_round)


def test_router_policy_without_a_router_is_refused_and_an_empty_pool_decodes_plainly() -> None:
    with pytest.raises(ValueError, match="needs a prompt router"):
        parse_policy("router", "normalhedge", ("a", "b"))
    assert parse_policy("router", "normalhedge", ()).kind == "none"
    routed = parse_policy("router", "normalhedge", ("a", "b"), has_router=True)
    assert (routed.kind, routed.routed, routed.label) == ("fixed", True, "router")



def test_normalhedge_router_starts_from_the_routers_probabilities_and_stays_lossless() -> None:
    """The learner's first round plays from the prior (half the router's probabilities, half
    uniform), the output is plain greedy decoding's, and the stats name the policy."""
    target = tiny_target(vocab=64, seed=2)
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(3)}
    engine = make_engine(target, drafters, TreeConfig(top_k=2, depth=3, total_tokens=6))
    router = engine.router = PromptRouter.fit(*synthetic(90, 0))
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    for prompt, label in zip(*synthetic(3, 3), strict=True):
        probs = dict(zip(router.labels, router.probabilities([prompt])[0], strict=True))
        expected = [0.5 * probs[d] + 0.5 / 3 for d in ("d0", "d1", "d2")]
        assert max(expected) == 0.5 * probs[label] + 0.5 / 3  # the routed drafter leads
        outputs = list(engine.generate(prompt, params, policy="normalhedge_router"))
        first = next(o.round for o in outputs if o.round is not None and o.round.drafter)
        ids = [t for out in outputs for t in out.token_ids]
        plain, _ = engine.generate_ids(prompt, params, policy="none")
        assert outputs[-1].stats.policy == "normalhedge_router" and ids == plain
        np.testing.assert_allclose([first.weights[d] for d in ("d0", "d1", "d2")], expected,
                                   atol=1e-6)


def test_normalhedge_router_needs_a_router() -> None:
    with pytest.raises(ValueError, match="'normalhedge_router' needs a prompt router"):
        parse_policy("normalhedge_router", "normalhedge", ("a", "b"))
    assert parse_policy("normalhedge_router", "normalhedge", ()).kind == "none"
    policy = parse_policy("normalhedge_router", "normalhedge", ("a", "b"), has_router=True)
    assert (policy.kind, policy.name, policy.router_prior) == ("learner", "normalhedge", True)
    assert policy.label == "normalhedge_router"


def test_a_server_default_of_normalhedge_router_falls_back_without_a_router() -> None:
    plain = parse_policy("auto", "normalhedge_router", ("a", "b"))
    assert (plain.name, plain.router_prior, plain.label) == ("normalhedge", False, "normalhedge")
    prior = parse_policy("auto", "normalhedge_router", ("a", "b"), has_router=True)
    assert (prior.name, prior.router_prior) == ("normalhedge", True)


def test_a_sessions_next_request_takes_the_router_prior_of_its_own_prompt() -> None:
    """Issue 40, defect I: a warm-started normalhedge_router learner kept the prior of the
    session's first prompt. It keeps its regrets and takes the new prompt's prior."""
    from core.selection.learners import NormalHedge

    target = tiny_target(vocab=64, seed=2)
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(3)}
    engine = make_engine(target, drafters, TreeConfig(top_k=2, depth=3, total_tokens=6))
    engine.router = PromptRouter.fit(*synthetic(90, 0))
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    prompts, labels = synthetic(3, 3)
    assert labels[0] != labels[1]
    list(engine.generate(prompts[0], params, policy="normalhedge_router", session="s"))
    engine.add_request("second", prompts[1], params, "normalhedge_router", session="s")
    state = engine._requests["second"]
    assert state.stats.warm_start_requests == 1
    learner = state.learner
    assert isinstance(learner, NormalHedge)
    np.testing.assert_allclose(learner.prior, engine._router_prior(prompts[1]))
    assert learner.regrets.any()  # what the first request taught is kept
