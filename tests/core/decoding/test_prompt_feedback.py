"""Feedback from the prompt's tail (SelectorConfig.prompt_windows): before the first round the
learner has scored every drafter on the prompt's last positions, so on a bigram target, with a
prompt written the way the target writes (its own chain), the drafter that copies it already
leads; outputs stay the target's (greedy: plain greedy). The evidence is a prior by default
(issue 40, defect B: as losses it locked the answer's best drafter out when the prompt's
domain differs from the answer's), and it covers the whole tail however the prompt was cut
into chunks (defect E)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.harness.tiny_models import bigram_setup, hf_greedy
from core.config import SamplingParams, SelectorConfig, TreeConfig
from core.decoding.prompt_feedback import PROMPT_PRIOR_MIX
from core.engine import RoundOutput, SpecEngine

TREE = TreeConfig(top_k=2, depth=3, total_tokens=6)
# The bigram target's own chain: the copy drafter reads the target's features and assumes the
# text is the target's (its guess at pair (x_j, x_j+1) is perm[perm[x_j]]).
PROMPT = [3] + hf_greedy(bigram_setup(TREE, randoms=0)[0], [3], 23)


def engine_with(windows: int, batching: bool = True, max_step_tokens: int = 512,
                evidence: str = "prior") -> SpecEngine:
    _, base = bigram_setup(TREE, randoms=3)
    cfg = replace(base.config, batching=batching, max_step_tokens=max_step_tokens,
                  selector=replace(base.config.selector, prompt_windows=windows,
                                   prompt_evidence=evidence))
    return SpecEngine(base.target, dict(base.snapshot.drafters), cfg)


def first_round(engine: SpecEngine, params: SamplingParams) -> RoundOutput:
    return next(o for o in engine.generate(PROMPT, params, "normalhedge") if o.round is not None)


GREEDY = SamplingParams(max_new_tokens=12, ignore_eos=True)


def test_without_prompt_windows_the_first_round_is_uniform() -> None:
    weights = first_round(engine_with(0), GREEDY).round.weights  # type: ignore[union-attr]
    assert list(weights.values()) == pytest.approx([1 / 4] * 4)


# As a prior: PROMPT_PRIOR_MIX of the prompt's NormalHedge distribution (all on "copy"), the
# rest uniform.
PRIOR_COPY = PROMPT_PRIOR_MIX * 1.0 + (1.0 - PROMPT_PRIOR_MIX) / 4
PRIOR_OTHER = (1.0 - PROMPT_PRIOR_MIX) / 4


def test_the_prompt_already_points_the_learner_at_the_drafter_that_fits() -> None:
    weights = first_round(engine_with(16), GREEDY).round.weights  # type: ignore[union-attr]
    assert weights["copy"] == pytest.approx(PRIOR_COPY, abs=0.01), weights
    assert all(w == pytest.approx(PRIOR_OTHER, abs=0.01) for d, w in weights.items() if d != "copy")
    losses = first_round(engine_with(16, evidence="losses"), GREEDY).round.weights  # type: ignore[union-attr]
    assert losses["copy"] > 0.9, losses


def test_a_prompt_prefilled_in_chunks_scores_its_whole_tail() -> None:
    """24 prompt tokens in steps of at most 23: the chunks are cut 7 + 17 so that the last one
    holds the 17-token tail (16 windows + the first root) instead of 23 + 1, which scored no
    prompt window at all. The learner starts as after a one-pass prefill."""
    whole = first_round(engine_with(16), GREEDY).round.weights  # type: ignore[union-attr]
    engine = engine_with(16, max_step_tokens=23)
    chunked = first_round(engine, GREEDY).round.weights  # type: ignore[union-attr]
    assert chunked == pytest.approx(whole), (chunked, whole)


def test_sampling_scores_the_prompt_against_p_tilde() -> None:
    params = SamplingParams(max_new_tokens=12, ignore_eos=True, temperature=0.7, seed=3)
    weights = first_round(engine_with(16), params).round.weights  # type: ignore[union-attr]
    assert weights["copy"] == pytest.approx(PRIOR_COPY, abs=0.01), weights


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
    import core.model.stacked_drafters as stacked_drafters

    def run() -> list[RoundOutput]:
        return list(engine_with(8).generate(PROMPT, GREEDY, "normalhedge", request_id="x"))

    tail_only = run()
    real = stacked_drafters._scored_rows
    stacked_drafters._scored_rows = lambda jobs: None  # type: ignore[assignment]
    try:
        every_pair = run()
    finally:
        stacked_drafters._scored_rows = real
    assert [o.token_ids for o in tail_only] == [o.token_ids for o in every_pair]
    weights = [o.round.weights for o in tail_only if o.round is not None]
    assert weights == [o.round.weights for o in every_pair if o.round is not None]
    assert tail_only[-1].stats.regret_curve == every_pair[-1].stats.regret_curve


def test_a_catch_up_job_scores_its_last_pairs_and_marks_the_others() -> None:
    import torch

    from core.model.stacked_drafters import CatchUpJob

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


def test_a_misleading_prompt_does_not_lock_out_the_answers_best_drafter() -> None:
    """Defect B in two drafters: 40 prompt windows favour "code" (loss 0 against 1), then the
    answer favours "prose" (0 against 0.5). As losses, NormalHedge gave "prose" weight 0 for
    every one of 30 answer windows; as a prior, "prose" leads within a few."""
    import numpy as np

    from core.decoding.prompt_feedback import prompt_prior
    from core.selection.learners import NormalHedge

    prompt = [np.array([0.0, 1.0])] * 40
    answer = [np.array([0.5, 0.0])] * 30
    as_losses = NormalHedge(2)
    for loss in prompt:
        as_losses.update(loss)
    prose_as_losses = []
    for loss in answer:
        as_losses.update(loss)
        prose_as_losses.append(float(as_losses.distribution()[1]))
    assert max(prose_as_losses) == 0.0
    as_prior = NormalHedge(2, prompt_prior(prompt, [0.5, 0.5]))
    lead = PROMPT_PRIOR_MIX + (1.0 - PROMPT_PRIOR_MIX) / 2
    assert as_prior.distribution().tolist() == pytest.approx([lead, 1.0 - lead])
    prose_as_prior = []
    for loss in answer:
        as_prior.update(loss)
        prose_as_prior.append(float(as_prior.distribution()[1]))
    assert prose_as_prior[2] > 0.5 and prose_as_prior[-1] > 0.9, prose_as_prior


def test_the_prior_keeps_a_share_of_the_old_one_and_sessions_keep_their_regrets() -> None:
    from core.decoding.prompt_feedback import prompt_prior
    from core.selection.learners import NormalHedge

    old = [0.2, 0.2, 0.6]
    prior = prompt_prior([[0.0, 1.0, 1.0]] * 10, old)
    rest = 1.0 - PROMPT_PRIOR_MIX
    assert prior == pytest.approx([PROMPT_PRIOR_MIX + rest * 0.2, rest * 0.2, rest * 0.6])
    assert all(p >= rest * o for p, o in zip(prior, old, strict=True))  # the bound's premise
    warm = NormalHedge(3)
    warm.update([1.0, 0.0, 0.5])
    regrets = warm.regrets.copy()
    warm.set_prior(prior)
    assert (warm.regrets == regrets).all() and warm.prior.tolist() == pytest.approx(prior)
