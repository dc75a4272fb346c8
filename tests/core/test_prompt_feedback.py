"""Feedback from the prompt's tail (SelectorConfig.prompt_windows): before the first round the
learner has scored every drafter on the prompt's last positions, so on a bigram target, with a
prompt written the way the target writes (its own chain), the drafter that copies it already
leads; outputs stay the target's (greedy: plain greedy)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.harness.tiny_models import bigram_setup, hf_greedy
from core.config import SamplingParams, SelectorConfig, TreeConfig
from core.engine import RoundOutput, SpecEngine

TREE = TreeConfig(top_k=2, depth=3, total_tokens=6)
# The bigram target's own chain: the copy drafter reads the target's features and assumes the
# text is the target's (its guess at pair (x_j, x_j+1) is perm[perm[x_j]]).
PROMPT = [3] + hf_greedy(bigram_setup(TREE, randoms=0)[0], [3], 23)


def engine_with(windows: int, batching: bool = True, max_step_tokens: int = 512) -> SpecEngine:
    _, base = bigram_setup(TREE, randoms=3)
    cfg = replace(base.config, batching=batching, max_step_tokens=max_step_tokens,
                  selector=replace(base.config.selector, prompt_windows=windows))
    return SpecEngine(base.target, dict(base.snapshot.drafters), cfg)


def first_round(engine: SpecEngine, params: SamplingParams) -> RoundOutput:
    return next(o for o in engine.generate(PROMPT, params, "normalhedge") if o.round is not None)


GREEDY = SamplingParams(max_new_tokens=12, ignore_eos=True)


def test_without_prompt_windows_the_first_round_is_uniform() -> None:
    weights = first_round(engine_with(0), GREEDY).round.weights  # type: ignore[union-attr]
    assert list(weights.values()) == pytest.approx([1 / 4] * 4)


@pytest.mark.parametrize("batching", [True, False])
def test_the_prompt_already_points_the_learner_at_the_drafter_that_fits(batching: bool) -> None:
    weights = first_round(engine_with(16, batching), GREEDY).round.weights  # type: ignore[union-attr]
    assert weights["copy"] > 0.9, weights


def test_a_prompt_prefilled_in_chunks_scores_its_last_chunk() -> None:
    engine = engine_with(16, max_step_tokens=10)  # 24 prompt tokens: chunks of 10, 10, 4
    weights = first_round(engine, GREEDY).round.weights  # type: ignore[union-attr]
    assert weights["copy"] > 0.5, weights


def test_sampling_scores_the_prompt_against_p_tilde() -> None:
    params = SamplingParams(max_new_tokens=12, ignore_eos=True, temperature=0.7, seed=3)
    weights = first_round(engine_with(16), params).round.weights  # type: ignore[union-attr]
    assert weights["copy"] > 0.9, weights


def test_output_is_still_plain_greedy_decoding() -> None:
    engine = engine_with(16)
    ids, stats = engine.generate_ids(PROMPT, SamplingParams(max_new_tokens=30, ignore_eos=True),
                                     "normalhedge")
    assert ids == hf_greedy(engine.target.model, PROMPT, 30)
    assert stats.drafter_per_round[0] == "copy"


def test_negative_prompt_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="prompt_windows"):
        SelectorConfig(prompt_windows=-1)


def test_a_prompt_catch_up_scores_only_its_tail_and_the_learner_sees_the_same() -> None:
    """The drafters' top-k is computed for the prompt's last W + 1 pairs only (what the windows
    and the first root read): the learner after the prompt, the rounds and the output equal
    those of a catch-up that scores every pair."""
    import core.drafter_pool as drafter_pool

    def run() -> list[RoundOutput]:
        return list(engine_with(8).generate(PROMPT, GREEDY, "normalhedge", request_id="x"))

    tail_only = run()
    real = drafter_pool._scored_rows
    drafter_pool._scored_rows = lambda jobs: None  # type: ignore[assignment]
    try:
        every_pair = run()
    finally:
        drafter_pool._scored_rows = real
    assert [o.token_ids for o in tail_only] == [o.token_ids for o in every_pair]
    weights = [o.round.weights for o in tail_only if o.round is not None]
    assert weights == [o.round.weights for o in every_pair if o.round is not None]
    assert tail_only[-1].stats.regret_curve == every_pair[-1].stats.regret_curve


def test_a_catch_up_job_scores_its_last_pairs_and_marks_the_others() -> None:
    import torch

    from core.drafter_pool import CatchUpJob

    _, base = bigram_setup(TREE, randoms=2)
    group = next(g for g in base.snapshot.groups if len(g) == 2)  # the two random drafters
    hidden = base.target.hidden_size
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(7, 3 * hidden, generator=gen)
    tokens = torch.randint(0, 32, (7,), generator=gen)

    def job(scored: int | None) -> CatchUpJob:
        return CatchUpJob(group.empty_kv(), features, tokens, torch.arange(7), scored)

    full, tail = group.catch_up_many([job(None), job(3)], top_k=2)
    assert torch.equal(tail.topk_ids[:, 4:], full.topk_ids[:, 4:])
    assert torch.equal(tail.topk_logp[:, 4:], full.topk_logp[:, 4:])
    assert (tail.topk_ids[:, :4] == -1).all() and torch.isinf(tail.topk_logp[:, :4]).all()
    assert torch.equal(tail.h_last, full.h_last)  # the caches and states are computed in full
