"""Honest baselines (issue 14, item 2): a fixed drafter and the bandits pay only for the
chosen drafter's catch-up, compute no γ, and still decode exactly like plain greedy."""

from __future__ import annotations

from dataclasses import replace

import pytest

import core.decoding.request_round
from bench.harness.tiny_models import bigram_setup, hf_greedy, random_drafter
from core.config import SamplingParams, TreeConfig
from core.engine import SpecEngine
from core.model.stacked_drafters import StackedGroup

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)
PARAMS = SamplingParams(max_new_tokens=40, ignore_eos=True)
PROMPT = [4, 9, 2]


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    return bigram_setup(TREE, randoms=7)


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every drafter catch-up pass as (drafters in the pass, pairs), and a tripwire on γ."""
    calls: list[tuple[int, int]] = []
    original = StackedGroup.catch_up_many

    def counted(self, jobs, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.extend((int(j.kv.keys.shape[0]), int(j.tokens.numel())) for j in jobs)
        return original(self, jobs, *args, **kwargs)

    def no_gamma(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        calls.append((-1, -1))  # recorded, so a test can see γ was computed
        raise AssertionError("γ computed")

    monkeypatch.setattr(StackedGroup, "catch_up_many", counted)
    for name in ("gamma_greedy", "gamma_sampling"):
        if hasattr(core.decoding.request_round, name):
            monkeypatch.setattr(core.decoding.request_round, name, no_gamma)
    return calls


def drafter_pairs(calls: list[tuple[int, int]]) -> int:
    return sum(n * t for n, t in calls)


@pytest.mark.parametrize("policy", ["fixed:copy", "fixed:r3", "ucbspec", "exp3spec"])
def test_baselines_catch_up_only_the_chosen_drafter_and_compute_no_gamma(
        setup, work: list[tuple[int, int]], policy: str) -> None:  # type: ignore[no-untyped-def]
    target, engine = setup
    ids, stats = engine.generate_ids(PROMPT, PARAMS, policy)
    assert ids == hf_greedy(target, PROMPT, PARAMS.max_new_tokens)
    assert work and all(n == 1 for n, _ in work)  # one drafter per pass, and no γ (n = -1)
    # Each verified pair is consumed at most once by each drafter that drafted.
    drafted = {d for d in stats.drafter_per_round}
    assert drafter_pairs(work) <= len(drafted) * (len(PROMPT) + len(ids))
    assert stats.estimates == () and stats.regret_curve == ()


def test_a_fixed_round_does_an_eighth_of_the_catch_up_work(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, engine = setup
    counts: dict[str, int] = {}
    original = StackedGroup.catch_up_many
    for policy in ("normalhedge", "fixed:copy"):
        calls: list[tuple[int, int]] = []

        def counted(self, jobs, *args, _calls=calls, **kwargs):  # type: ignore[no-untyped-def]
            _calls.extend((int(j.kv.keys.shape[0]), int(j.tokens.numel())) for j in jobs)
            return original(self, jobs, *args, **kwargs)

        monkeypatch.setattr(StackedGroup, "catch_up_many", counted)
        _, stats = engine.generate_ids(PROMPT, PARAMS, policy)
        counts[policy] = drafter_pairs(calls) // max(stats.rounds, 1)
    assert counts["fixed:copy"] * 4 <= counts["normalhedge"]  # 8 drafters vs 1


def test_plain_decoding_runs_no_drafter(setup, work: list[tuple[int, int]]) -> None:  # type: ignore[no-untyped-def]
    target, engine = setup
    ids, _ = engine.generate_ids(PROMPT, PARAMS, "none")
    assert ids == hf_greedy(target, PROMPT, PARAMS.max_new_tokens) and work == []


def test_evaluate_all_restores_the_baselines_regret_statistics(setup) -> None:  # type: ignore[no-untyped-def]
    target, engine = setup
    full = SpecEngine(engine.target, dict(engine.snapshot.drafters),
                      replace(engine.config, evaluate_all=True))
    ids, stats = full.generate_ids(PROMPT, PARAMS, "fixed:r1")
    assert ids == hf_greedy(target, PROMPT, PARAMS.max_new_tokens)
    assert stats.regret_tokens > stats.rounds  # the copying drafter would have done far better
    assert len(stats.estimates) >= stats.rounds - 1  # the last round is not evaluated


def test_full_evaluation_keeps_snapshot_order_across_groups() -> None:
    """Drafters of two shapes form two stacked groups, interleaved in the snapshot: each
    drafter's γ must still be its own (greedy: ÂL >= 2 iff its first level was accepted)."""
    target, engine = bigram_setup(TREE, randoms=2)
    drafters = dict(engine.snapshot.drafters)
    mixed = {"a": drafters["r0"], "b": random_drafter(target, draft_vocab=20, seed=5),
             "copy": drafters["copy"], "c": random_drafter(target, draft_vocab=20, seed=6)}
    eng = SpecEngine(engine.target, mixed, replace(engine.config, evaluate_all=True))
    assert len(eng.snapshot.groups) == 3
    checked = 0
    for policy in ("fixed:b", "fixed:copy", "fixed:c"):
        ids, stats = eng.generate_ids(PROMPT, PARAMS, policy)
        assert ids == hf_greedy(target, PROMPT, PARAMS.max_new_tokens)
        for est, realised in stats.estimates:
            assert (est >= 2.0) == (realised >= 2)
            checked += 1
    assert checked > 20


def test_a_bandit_switching_drafters_catches_each_up_on_what_it_missed(setup) -> None:  # type: ignore[no-untyped-def]
    """UCBSpec plays every arm once first: each arm drafts after lagging behind, so its lazy
    catch-up must cover everything since it last drafted (else the output would differ)."""
    target, engine = setup
    for prompt in ([1], [30, 31, 0, 5, 7]):
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=60, ignore_eos=True),
                                         "ucbspec")
        assert ids == hf_greedy(target, prompt, 60)
        assert len(set(stats.drafter_per_round)) == 8
