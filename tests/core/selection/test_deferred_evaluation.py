"""Deferred counterfactual evaluation (SelectorConfig.eval_every): between evaluations only the
chosen drafter catches up, in its draft copy; the n-th round scores every pair since the last
evaluation, so the learner sees exactly the windows it would see with eval_every=1, only later,
and the chosen drafter drafts exactly the trees it would draft then."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.harness.tiny_models import bigram_setup, hf_greedy
from core.config import SamplingParams, SelectorConfig, TreeConfig
from core.engine import SpecEngine
from core.model.stacked_drafters import StackedGroup

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    return bigram_setup(TREE, randoms=5)


def engine_with(engine: SpecEngine, every: int, *, evaluate_all: bool = False) -> SpecEngine:
    selector = replace(engine.config.selector, eval_every=every)
    cfg = replace(engine.config, selector=selector, evaluate_all=evaluate_all)
    return SpecEngine(engine.target, dict(engine.snapshot.drafters), cfg)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_deferred_windows_equal_the_per_round_windows(setup, temperature: float) -> None:  # type: ignore[no-untyped-def]
    """A fixed drafter makes the trajectory and the rounds independent of the learner, so each
    window's ÂL (every drafter's estimate, from the same evidence) must come out identical; only
    the last windows differ (left unscored when the request ends)."""
    _, base = setup
    params = SamplingParams(max_new_tokens=60, ignore_eos=True, temperature=temperature, seed=3)
    runs = {}
    for every in (1, 3):
        engine = engine_with(base, every, evaluate_all=True)
        ids, stats = engine.generate_ids([5, 6], params, "fixed:r1")
        runs[every] = (ids, stats)
    (ids1, st1), (ids3, st3) = runs[1], runs[3]
    assert ids1 == ids3 and st1.rounds == st3.rounds > 10
    scored = len(st1.estimates) - 4  # the windows scored before the request's last rounds
    assert scored > 8
    assert st3.estimates[:scored] == st1.estimates[:scored]


def test_a_deferred_learner_still_finds_the_best_drafter(setup) -> None:  # type: ignore[no-untyped-def]
    target, base = setup
    engine = engine_with(base, 4)
    ids, stats = engine.generate_ids([7], SamplingParams(max_new_tokens=120, ignore_eos=True),
                                     "normalhedge")
    assert ids == hf_greedy(target, [7], 120)  # lossless, as ever
    assert stats.weights["copy"] > 0.9
    assert stats.drafter_per_round[-5:].count("copy") >= 4


def test_between_evaluations_only_the_chosen_drafter_catches_up(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every drafter still consumes every pair (same drafter-pairs as eval_every=1), but the
    other drafters' weights are read once per evaluation, not once per round."""
    _, base = setup
    calls: list[int] = []
    real = StackedGroup.catch_up_many

    def counting(self, jobs, top_k, rows=None):  # type: ignore[no-untyped-def]
        calls.append(len(range(len(self))[rows]) if rows is not None else len(self))
        return real(self, jobs, top_k, rows)

    monkeypatch.setattr(StackedGroup, "catch_up_many", counting)
    reads = {}
    for every in (1, 4):
        calls.clear()
        engine = engine_with(base, every, evaluate_all=True)
        _, stats = engine.generate_ids([5, 6], SamplingParams(max_new_tokens=60, ignore_eos=True),
                                       "fixed:r1")
        reads[every] = (sum(calls), stats.rounds)
    (drafter_passes_1, rounds_1), (drafter_passes_4, rounds_4) = reads[1], reads[4]
    assert rounds_1 == rounds_4
    # eval_every=1: all 6 drafters every round; 4: the chosen one each round, the rest 1 in 4
    assert drafter_passes_4 < 0.5 * drafter_passes_1


def test_a_drafter_drafts_from_its_copy_what_it_would_draft_from_its_group(  # type: ignore[no-untyped-def]
        setup, monkeypatch) -> None:
    """Between evaluations the chosen drafter drafts from a draft copy (its group row copied at
    the last evaluation, then caught up alone); every tree must equal the tree drafted from a
    group that caught up every round."""
    import core.speculation.eagle3_members

    _, base = setup
    trees: list[list[int]] = []
    real = core.speculation.eagle3_members.grow_trees

    def recording(drafter, rows, cfg):  # type: ignore[no-untyped-def]
        out = real(drafter, rows, cfg)
        trees.extend(t.tokens.tolist() for t in out)
        return out

    monkeypatch.setattr(core.speculation.eagle3_members, "grow_trees", recording)
    drafted = {}
    for every in (1, 4):
        trees.clear()
        engine = engine_with(base, every, evaluate_all=True)
        engine.generate_ids([5, 6], SamplingParams(max_new_tokens=60, ignore_eos=True), "fixed:r2")
        drafted[every] = list(trees)
    assert len(drafted[1]) > 10
    assert drafted[4] == drafted[1]


def test_eval_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="eval_every"):
        SelectorConfig(eval_every=0)
