"""The "time" loss (core/selection/arm_costs.py): each arm's measured time per committed token, with
plain decoding as the learner's last arm, so that a request stops drafting where no drafter pays for
its rows and keeps drafting where one does; the tokens never depend on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.harness.tiny_models import bigram_setup
from core.config import SamplingParams, SelectorConfig, TreeConfig
from core.decoding.request import PLAIN_ARM, RequestState, parse_policy
from core.engine import RoundOutput, SpecEngine
from core.selection.arm_costs import (
    FREE,
    NEURAL,
    PLAIN,
    PROBE_EVERY,
    PROBE_STEPS,
    CostModel,
    PlannedRow,
    StepCosts,
    StepSample,
    TimePerToken,
    fit_pass,
    time_losses,
)
from core.selection.arm_policy import ArmPolicy
from core.selection.feedback import WindowLoss
from core.selection.learners import NormalHedge
from core.stats import RequestStats
from tests.modelled_clock import ModelledClock, slowed_rows

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


# -- the cost model ------------------------------------------------------------------------------

def step(requests: int, rows: int, verify_s: float, **kw: float) -> StepSample:
    return StepSample(requests=requests, rows=rows, verify_s=verify_s, **kw)  # type: ignore[arg-type]


def test_the_pass_fit_recovers_its_terms_and_leaves_a_stall_out() -> None:
    samples = [step(4, r, 0.01 + 0.002 * r) for r in (4, 52, 4, 52, 30)]
    assert fit_pass(samples) == pytest.approx((0.01, 0.002))
    assert fit_pass([*samples, step(4, 4, 5.0)]) == pytest.approx((0.01, 0.002))
    # rows explain everything: a line through the origin, never a negative α
    alpha, beta = fit_pass([step(1, 1, 0.001), step(1, 13, 0.1)])
    assert alpha == 0.0 and beta > 0.0


def test_the_model_waits_for_steps_of_different_sizes() -> None:
    costs = StepCosts()
    for _ in range(5):
        costs.record(step(2, 26, 0.05))
    assert costs.model(2) is None  # only speculative steps: β cannot be told from α
    costs.record(step(2, 2, 0.02))
    model = costs.model(3)  # 3 requests fall in the bucket of 2
    assert model is not None and model.beta == pytest.approx(0.03 / 24)
    assert costs.model(1) is None and costs.model(4) is None  # each bucket on its own


def test_plain_decodings_time_per_token_is_measured_on_steps_where_every_pool_slept() -> None:
    """What an awake request's saving is measured against: the model's bare plain cost until
    a step of that size ran with every pool asleep, then those steps' running mean wall time
    per token (a stall left out); each size on its own."""
    costs = StepCosts()
    assert costs.plain_token_s(2) is None
    costs.record(step(2, 26, 0.05))
    costs.record(step(2, 2, 0.02))
    model = costs.model(2)
    assert model is not None
    assert costs.plain_token_s(2) == pytest.approx(model.bare_cost(1.0, PLAIN))
    costs.note_asleep_step(2, 0.03)
    assert costs.plain_token_s(2) == pytest.approx(0.015)
    costs.note_asleep_step(2, 1.0)  # a stall
    costs.note_asleep_step(2, 0.04)
    assert costs.plain_token_s(2) == pytest.approx((0.03 + 0.1 * 0.01) / 2)
    assert costs.plain_token_s(4) is None  # a size with neither


def test_probes_alternate_first_then_one_plain_step_in_probe_every() -> None:
    costs = StepCosts()
    seen = []
    for _ in range(PROBE_STEPS + 2 * PROBE_EVERY):
        seen.append(costs.speculate(4))
        costs.record(step(4, 52 if seen[-1] else 4, 0.05))
    assert seen[:PROBE_STEPS] == [True, False] * (PROBE_STEPS // 2)
    assert seen[PROBE_STEPS:].count(False) == 2
    assert costs.speculate(1)  # another bucket starts its own probes


def test_an_arms_cost_has_its_share_of_the_pass_its_own_rows_and_its_drafting() -> None:
    """The pass computes each request's own rows (no padding to the widest tree): among 4
    requests decoding plain, a 13-row tree adds its 12 rows, not 4 x 12."""
    model = CostModel(requests=4, alpha=0.04, beta=0.001, neural=0.005, free=0.0001,
                      evaluate=0.002, evaluate_plain=0.0005, other=0.001)
    shared = 0.01 + 0.001 + 0.002 + 0.001  # α/4, the request's own row, e, o
    assert model.arm_cost(1.0, PLAIN) == pytest.approx(shared - 0.0015)
    assert model.arm_cost(13.0, NEURAL) == pytest.approx(shared + 12 * 0.001 + 0.005)
    assert model.arm_cost(9.0, FREE) == pytest.approx(shared + 8 * 0.001 + 0.0001)


def test_a_steps_sample_counts_the_rows_of_its_trees() -> None:
    """One request drafting beside four decoding plain: the sample's rows are the trees' own
    (the forward computes no padding row's linear layers, the canonical kernel no padding
    query), what the step's time follows."""
    engine = time_engine("length")
    samples: list[StepSample] = []
    record = engine.costs.record

    def recording(sample: StepSample) -> None:
        samples.append(sample)
        record(sample)

    engine.costs.record = recording  # type: ignore[method-assign]
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    engine.add_request("d", [3, 1, 4, 1, 5], params, "fixed:copy")
    for i in range(4):
        engine.add_request(f"p{i}", [3, 1, 4, 2 + i, 5], params, "none")
    checked = 0
    while engine.has_unfinished():
        before = len(samples)
        rounds = [o.round for o in engine.step() if o.round is not None]
        if len(rounds) == 5 and len(samples) == before + 1:
            assert samples[-1].rows == sum(r.drafted + 1 for r in rounds)
            checked += max(r.drafted for r in rounds) > 0
    assert checked >= 2


def model(alpha: float, beta: float, neural: float = 0.0) -> CostModel:
    return CostModel(requests=4, alpha=alpha, beta=beta, neural=neural, free=0.0,
                     evaluate=0.001, evaluate_plain=0.0005, other=0.0)


def test_a_step_drafts_only_where_its_plan_beats_plain_decoding() -> None:
    """Four requests: one expects 3 tokens from a 13-row EAGLE tree, three chose plain. The
    step pays the drafting once and the tree's own rows for the one request's 2 extra
    tokens."""
    plan = [PlannedRow(13.0, NEURAL, 3.0)] + [PlannedRow(1.0, PLAIN, 1.0)] * 3
    # memory-bound pass, cheap drafting: 6 tokens in 0.0476 s beat 4 in 0.0424 s
    assert model(alpha=0.04, beta=0.0001, neural=0.002).step_pays(plan)
    # a drafting pass half as dear as the target's: 6 tokens in 0.0656 s lose
    assert not model(alpha=0.04, beta=0.0001, neural=0.02).step_pays(plan)
    # rows dear: 6 tokens in 0.056 s against 4 in 0.030 s lose
    assert not model(alpha=0.02, beta=0.002).step_pays(plan)
    # there a drafter that commits 5 a round pays, with another request on a 9-row lookup
    # that commits 3 (10 tokens in 0.072 s against 4 in 0.030 s)
    plan[0] = PlannedRow(13.0, NEURAL, 5.0)
    plan[1] = PlannedRow(9.0, FREE, 3.0)
    assert model(alpha=0.02, beta=0.002).step_pays(plan)
    # a row with no estimate yet counts one token (its learner learns from plain rounds'
    # evaluation): a tree that memory-bound pass would pay for at 2 tokens does not draft
    unknown = [PlannedRow(13.0, NEURAL, None)] + [PlannedRow(1.0, PLAIN, 1.0)] * 3
    assert not model(alpha=0.04, beta=0.0001, neural=0.002).step_pays(unknown)
    assert model(alpha=0.04, beta=0.0001, neural=0.002).step_pays(
        [PlannedRow(13.0, NEURAL, 2.0)] + unknown[1:])
    assert StepCosts().step_pays(plan)  # nothing measured: draft


def test_a_step_judged_not_to_pay_decodes_plain_seeded_samples_included() -> None:
    # a seeded sample's text does not depend on the trees (PositionNoise), so it is judged
    # like the rest
    engine = time_engine()
    engine.costs.step_pays = lambda plan: False  # type: ignore[method-assign]
    greedy = SamplingParams(max_new_tokens=24, ignore_eos=True)
    seeded = SamplingParams(max_new_tokens=24, ignore_eos=True, temperature=1.0, seed=3)
    engine.add_request("g", [3, 1, 4, 1, 5], greedy, "normalhedge")
    engine.add_request("s", [2, 7, 1, 8], seeded, "normalhedge")
    engine.add_request("f", [2, 7, 1, 9], greedy, "fixed:copy")  # no plain arm: drafts
    rounds: dict[str, list[bool]] = {"g": [], "s": [], "f": []}
    while engine.has_unfinished():
        for o in engine.step():
            if o.round is not None and o.round.batch_rows >= 2:  # a step judges 2+ requests
                rounds[o.request_id].append(o.round.plain)
    assert rounds["g"] and all(rounds["g"])
    assert rounds["s"] and all(rounds["s"])
    assert not any(rounds["f"])
    # one request alone: its learner's plain arm already weighs the same costs, no veto
    alone = [o.round.plain for o in engine.generate([3, 1, 4, 1, 5], greedy, "normalhedge")
             if o.round is not None]
    assert not all(alone)


def test_time_losses_are_bounded_and_rank_arms_by_net_seconds() -> None:
    """Net seconds s = c - λ·ÂL with λ plain decoding's cost (its s is 0); losses in [0, 1]."""
    costs = np.array([0.03, 0.012, 0.01])  # an EAGLE tree, a lookup chain, plain
    loss, net = time_losses(np.array([2.0, 1.5, 1.0]), costs, max_len=5.0)
    assert net == pytest.approx([0.01, -0.003, 0.0])
    assert ((loss >= 0.0) & (loss <= 1.0)).all()
    assert np.argsort(loss).tolist() == [1, 2, 0]  # the cheap chain, plain, the dear tree
    loss, _ = time_losses(np.array([4.0, 1.0, 1.0]), costs, max_len=5.0)
    assert int(np.argmin(loss)) == 0  # the tree pays once it commits 4 tokens a round
    bounds, _ = time_losses(np.array([5.0, 1.0, 1.0]), np.array([0.01, 0.03, 0.01]), 5.0)
    assert bounds[0] == pytest.approx(0.0) and bounds[1] == pytest.approx(1.0)


def test_summed_losses_rank_by_tokens_per_second_not_by_mean_ratio() -> None:
    """A drafter whose ÂL alternates 1 and 4 at 1.6x plain's round cost commits 2.5 tokens a
    round, 1.56x plain's rate: its summed loss beats plain's, though its mean c/ÂL (0.0100)
    is plain's (0.0100)."""
    costs = np.array([0.016, 0.01])
    total = sum(time_losses(np.array([est, 1.0]), costs, 5.0)[0] for est in (1.0, 4.0, 1.0, 4.0))
    assert total[0] < total[1]
    ratios = [0.016 / est for est in (1.0, 4.0)]
    assert np.mean(ratios) == pytest.approx(0.01)  # what a ratio loss would have tied


def _hedge_on(windows: list[tuple[np.ndarray, np.ndarray]], rated: bool) -> np.ndarray:
    """NormalHedge's final weights over windows of (costs, ÂL) [A] (plain last), the loss's
    rate the running best time per token (`rated`) or plain decoding's cost."""
    learner, rates = NormalHedge(len(windows[0][0])), TimePerToken()
    for costs, est in windows:
        rate = rates.add(costs, est, np.ones(len(costs), dtype=bool)) if rated else None
        learner.update(time_losses(est, costs, 5.0, rate)[0])
    return learner.distribution()


def test_the_running_rate_is_the_best_arms_time_per_token_over_the_windows_it_was_scored() -> None:
    rates = TimePerToken()
    assert rates.rate is None and rates.per_arm() is None
    awake = np.array([True, False, True])
    assert rates.add(np.array([0.06, 0.05, 0.04]), np.array([3.0, 9.0, 1.0]), awake) == 0.02
    rates.add(np.array([0.06, 0.05, 0.04]), np.array([1.0, 9.0, 1.0]), np.ones(3, dtype=bool))
    assert rates.per_arm() == pytest.approx([0.03, 0.05 / 9, 0.04])  # arm 1 scored once
    assert rates.rate == pytest.approx(0.05 / 9)


def test_summed_losses_order_arms_by_time_per_token_not_by_seconds_saved() -> None:
    """Issue 58's finding J: lookup 54 ms a round at ÂL 2.2 (24.5 ms a token), suffix 75 ms at
    ÂL 2.9 (25.9 ms a token), plain 40 ms, each window's figures 10% noisy. Valued at plain's
    cost the sum ranks suffix first (it saves more seconds against plain); valued at the running
    best rate the order of the summed losses is the order of the arms' time per token, and
    NormalHedge's weight goes to the lookup."""
    gen = np.random.default_rng(0)
    mean_costs, mean_est = np.array([0.054, 0.075, 0.040]), np.array([2.2, 2.9, 1.0])
    windows = []
    for _ in range(400):
        noise = 1.0 + 0.1 * gen.standard_normal(3)
        est = np.maximum(mean_est * noise, 1.0)
        est[-1] = 1.0
        windows.append((mean_costs * (1.0 + 0.1 * gen.standard_normal(3)), est))
    rates, total = TimePerToken(), np.zeros(3)
    for costs, est in windows:
        rate = rates.add(costs, est, np.ones(3, dtype=bool))
        total += time_losses(est, costs, 5.0, rate)[0]
    per_token = rates.per_arm()
    assert per_token is not None
    assert np.argsort(total).tolist() == np.argsort(per_token).tolist() == [0, 1, 2]
    assert int(np.argmax(_hedge_on(windows, rated=True))) == 0
    assert int(np.argmax(_hedge_on(windows, rated=False))) == 1  # what plain's rate chose


def measured_time_arms() -> ArmPolicy | None:
    """A NormalHedge request's arm policy under the time loss, its one-request steps
    measured (a 13-row drafting step and a plain one)."""
    _, base = bigram_setup(TREE, randoms=2)
    config = replace(base.config, selector=SelectorConfig(loss="time"))
    costs = StepCosts()
    costs.record(step(1, 13, 0.05, neural_rows=1, neural_s=0.01))
    costs.record(step(1, 1, 0.02))
    state = RequestState.create("r", [3, 1, 4], SamplingParams(max_new_tokens=8),
                                parse_policy("normalhedge", "normalhedge", base.snapshot.ids),
                                base.snapshot, config, costs=costs)
    return state.arms


def test_a_requests_losses_value_tokens_at_its_running_best_rate() -> None:
    """ArmPolicy.arm_losses: each window adds to the request's running time per token, and
    its losses value the tokens at the best arm's rate so far, not at plain decoding's cost."""
    arms = measured_time_arms()
    assert arms is not None and arms.plain_arm
    arm_costs = arms.arm_costs()
    assert arm_costs is not None
    est = np.array([4.0, 1.0, 1.0])
    window = WindowLoss(np.zeros(3), np.ones(3, dtype=bool), est, costs=arm_costs)
    loss = arms.arm_losses(window).loss
    est_all = np.append(est, 1.0)
    rate = float(np.min(arm_costs / est_all))
    top = arms.members.round_max
    assert arms.time_per_token.rate == pytest.approx(rate)
    assert loss == pytest.approx(time_losses(est_all, arm_costs, top, rate)[0])
    assert not np.allclose(loss, time_losses(est_all, arm_costs, top)[0])


def test_plain_decoding_sleeps_in_the_prompts_windows() -> None:
    """A position window (the prompt's: no step, no costs of its own) scores the drafters
    against each other, not against plain decoding, whose cost is measured: plain decoding is
    asleep in it and its regret does not move, where a round's window moves it."""
    arms = measured_time_arms()
    assert arms is not None and isinstance(arms.learner, NormalHedge)
    learner, est = arms.learner, np.ones(3)  # every drafter failed: plain decoding did best
    prompt = arms.arm_losses(WindowLoss(np.zeros(3), np.ones(3, dtype=bool), est))
    assert prompt.awake.tolist() == [True, True, True, False]
    learner.update(learner.sleeping_losses(prompt.loss, prompt.awake))
    assert learner.regrets[-1] == pytest.approx(0.0)
    in_a_round = arms.arm_losses(WindowLoss(np.zeros(3), np.ones(3, dtype=bool), est,
                                            costs=arms.arm_costs()))
    assert in_a_round.awake.all()
    learner.update(learner.sleeping_losses(in_a_round.loss, in_a_round.awake))
    assert learner.regrets[-1] > 0.0


def test_a_windows_loss_is_costed_at_the_step_its_round_ran_in() -> None:
    """Issue 58, L: a window's loss is known rounds after its round ran; it is costed at that
    round's step (size, neighbours), carried with the window, not at the request's latest."""
    _, base = bigram_setup(TREE, randoms=2)
    config = replace(base.config, selector=SelectorConfig(loss="time"))
    costs = StepCosts()
    for b in (1, 8):
        costs.record(step(b, 13 * b, 0.05 * b, neural_rows=b, neural_s=0.01 * b))
        costs.record(step(b, b, 0.02 + 0.001 * b))
    state = RequestState.create("r", [3, 1, 4], SamplingParams(max_new_tokens=8),
                                parse_policy("normalhedge", "normalhedge", base.snapshot.ids),
                                base.snapshot, config, costs=costs)
    arms = state.arms
    assert arms is not None
    at_one = arms.arm_costs()
    arms.step_requests = 8  # the step the loss becomes known in
    at_eight = arms.arm_costs()
    assert at_one is not None and at_eight is not None and not np.allclose(at_one, at_eight)
    est = np.array([4.0, 1.0, 1.0])
    loss = arms.arm_losses(WindowLoss(np.zeros(3), np.ones(3, dtype=bool), est,
                                      costs=at_one)).loss
    est_all = np.append(est, 1.0)
    rate = float(np.min(at_one / est_all))
    assert loss == pytest.approx(time_losses(est_all, at_one, arms.members.round_max, rate)[0])


def test_the_regret_in_seconds_is_the_learners_under_its_weights() -> None:
    """The regret reported under the time loss is the one the learner minimises: its expected
    net seconds under the weights it updated with less the best arm's. A learner that kept all
    its weight on the best arm reports 0 (and a time per token 1.0x the best's) whatever rounds
    were played; uniform weights report what they lost."""
    arms = ("a", "b", PLAIN_ARM)
    windows = [(np.array([-0.02, 0.01, 0.004]), np.array([3.0, 1.5, 1.0])),
               (np.array([-0.01, 0.02, 0.006]), np.array([2.5, 1.2, 1.0]))]
    sure, uniform = RequestStats("normalhedge", time_loss=True), RequestStats("normalhedge",
                                                                             time_loss=True)
    for net, est in windows:
        sure.record_time_window(arms, np.array([1.0, 0.0, 0.0]), net, est, 0.01)
        uniform.record_time_window(arms, np.full(3, 1 / 3), net, est, 0.01)
        sure.record_window({"a": float(est[0]), "b": float(est[1])}, PLAIN_ARM, 1)
    done = sure.snapshot()
    assert done.regret_seconds == pytest.approx(0.0)
    assert done.regret_time_ratio == pytest.approx(1.0)
    assert done.regret_tokens is None and done.regret_unit == "s" and done.regret == 0.0
    mean = sum(float(net.mean()) for net, _ in windows)
    assert uniform.snapshot().regret_seconds == pytest.approx(mean + 0.03)
    tokens = RequestStats("normalhedge")  # an acceptance loss: the token regret as before
    tokens.record_window({"a": 3.0, "b": 1.5}, "b", 2)
    assert tokens.snapshot().regret == pytest.approx(1.5)
    assert tokens.snapshot().regret_unit == "tokens"


# -- in the engine -------------------------------------------------------------------------------

def time_engine(loss: str = "time") -> SpecEngine:
    """The bigram pool (a drafter that copies the target and two random ones) with the time
    loss, drafting every step, on a modelled clock (`slowed_rows` sets the pass's costs)."""
    _, base = bigram_setup(TREE, randoms=2)
    selector = SelectorConfig(loss=loss)  # type: ignore[arg-type]
    return SpecEngine(base.target, dict(base.snapshot.drafters),
                      replace(base.config, selector=selector, batching=True),
                      clock=ModelledClock())


def run(engine: SpecEngine, streams: int = 4, tokens: int = 96,
        policy: str = "normalhedge") -> dict[str, list[RoundOutput]]:
    params = SamplingParams(max_new_tokens=tokens, ignore_eos=True)
    for i in range(streams):
        engine.add_request(f"r{i}", [3, 1, 4, 1 + i, 5], params, policy)
    outs: dict[str, list[RoundOutput]] = {f"r{i}": [] for i in range(streams)}
    while engine.has_unfinished():
        for out in engine.step():
            outs[out.request_id].append(out)
    return outs


def ids(outs: dict[str, list[RoundOutput]]) -> dict[str, list[int]]:
    return {rid: [t for o in os for t in o.token_ids] for rid, os in outs.items()}


def plain_share_late(outs: list[RoundOutput]) -> float:
    """The share of plain rounds in the request's second half."""
    rounds = [o.round for o in outs if o.round is not None]
    late = rounds[len(rounds) // 2:]
    return sum(r.plain for r in late) / len(late)


def test_where_verified_rows_are_dear_the_learner_decodes_plain_with_the_same_tokens() -> None:
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)  # 13 rows cost 13 plain steps
    outs = run(engine)
    assert plain_share_late(outs["r0"]) > 0.8
    reference = time_engine("length")
    assert ids(outs) == ids(run(reference))  # greedy: the arm changes no token
    last = outs["r0"][-1].stats
    assert last.regret_seconds is not None and PLAIN_ARM in last.arm_seconds
    assert last.regret_tokens is None and last.regret == last.regret_seconds  # time's own
    # no arm beat plain decoding in hindsight (a drafter asleep through a window is charged
    # the learner's expectation there, as its loss is: asleep throughout, plain's seconds)
    assert last.arm_seconds[PLAIN_ARM] == pytest.approx(min(last.arm_seconds.values()))
    # the statistics: plain rounds outside `rounds` and MAT, every pass counted
    assert last.plain_rounds > 0 and last.rounds >= 1
    assert last.target_forwards == last.rounds + last.plain_rounds + 1  # + the prefill pass
    spec_tokens = last.completion_tokens - last.prefill_tokens - last.plain_tokens
    assert last.mean_acceptance_length == spec_tokens / last.rounds
    assert len(last.drafter_per_round) == last.rounds
    plain = [o.round for o in outs["r0"] if o.round is not None and o.round.plain]
    assert all(r.drafted == 0 and r.drafter is None and r.committed == 1 for r in plain)
    # every round has its own index (the live page drops a repeated index as a re-delivery),
    # and the statistics name the plain ones by it, for the live page to interleave
    indices = [o.round.round_index for o in outs["r0"] if o.round is not None]
    assert indices == list(range(len(indices)))
    assert list(last.plain_round_indices) == [r.round_index for r in plain]


def test_where_a_pass_costs_the_same_whatever_its_rows_the_learner_drafts() -> None:
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.01, per_row_s=0.0)  # memory-bound: a pass is a pass
    outs = run(engine)
    assert plain_share_late(outs["r0"]) < 0.15  # the probes' plain steps only
    last = outs["r0"][-1].stats
    assert min(last.arm_seconds, key=last.arm_seconds.__getitem__) == "copy"
    assert last.mean_acceptance_length > 3.0


def test_without_a_drafter_that_pays_cheap_rows_still_go_plain() -> None:
    """Two random drafters commit about one token a round: their rows cost more than nothing,
    so plain decoding wins even where a row costs a twentieth of the pass."""
    _, base = bigram_setup(TREE, randoms=2)
    drafters = {d: m for d, m in base.snapshot.drafters.items() if d != "copy"}
    engine = SpecEngine(base.target, drafters,
                        replace(base.config, selector=SelectorConfig(loss="time")),
                        clock=ModelledClock())
    slowed_rows(engine, per_call_s=0.01, per_row_s=0.0005)
    outs = run(engine, streams=2)
    assert plain_share_late(outs["r0"]) > 0.8


def test_only_counterfactual_learners_get_the_plain_arm() -> None:
    engine = time_engine()
    params = SamplingParams(max_new_tokens=4)
    engine.add_request("nh", [3, 1, 4], params, "normalhedge")
    engine.add_request("ucb", [3, 1, 4], params, "ucbspec")
    engine.add_request("fixed", [3, 1, 4], params, "fixed:copy")
    states = engine._requests
    assert states["nh"].plain_arm and states["nh"].learner.num_experts == 4  # type: ignore[union-attr]
    assert not states["ucb"].plain_arm and states["ucb"].learner.num_experts == 3  # type: ignore[union-attr]
    assert not states["fixed"].plain_arm
    assert set(states["nh"].weights()) == {"r0", "r1", "copy"}  # drafters' weights only


def test_a_session_keeps_the_plain_arm() -> None:
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)
    list(engine.generate([3, 1, 4, 1, 5], params, "normalhedge", session="s"))
    engine.add_request("next", [3, 1, 4, 1, 6], params, "normalhedge", session="s")
    learner = engine._requests["next"].learner
    assert learner is not None and learner.num_experts == 4
    assert int(np.argmax(learner.distribution())) == 3  # what the first request learned: plain


def test_greedy_output_is_the_targets_with_lookups_eagle_and_plain_rounds_in_one_batch() -> None:
    """On the real clock, the model-free pool: every kind of round (an EAGLE tree, a lookup
    chain, a suffix tree, the plain arm, a probe) verifies to the target's greedy output."""
    from bench.harness.tiny_models import hf_greedy, make_engine, tiny_target
    from tests.core.test_model_free_engine import PROMPTS, pool

    target = tiny_target()
    engine = make_engine(target, pool(target), TREE,  # type: ignore[arg-type]
                         selector=SelectorConfig(loss="time"))
    params = SamplingParams(max_new_tokens=40, ignore_eos=True)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"r{i}", prompt, params, "normalhedge")
    out: dict[str, list[int]] = {}
    plain = drafted = 0
    while engine.has_unfinished():
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.token_ids)
            plain += o.round is not None and o.round.plain
            drafted += o.round is not None and o.round.drafted > 0
    for i, prompt in enumerate(PROMPTS):
        assert out[f"r{i}"] == hf_greedy(target, prompt, 40)
    assert plain > 0 and drafted > 0


def test_plain_rounds_of_the_plain_arm_still_score_the_drafters_every_evaluation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain arm's rounds keep the evaluation period: the learner must see its drafters'
    losses as often to leave plain decoding when one pays again (the retired speculation gate's
    plain steps scored them four times less often, which made plain rounds look cheaper and
    kept the learner plain). The drafters kept awake here: asleep, they are not scored at all
    (tests/core/selection/test_sleeping_drafters.py)."""
    monkeypatch.setattr(ArmPolicy, "should_sleep", lambda self, fed: False)
    monkeypatch.setattr(ArmPolicy, "pool_should_sleep", lambda self, asleep: False)
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)  # the learner goes plain
    catch_ups = counted_catch_ups(monkeypatch)
    outs = run(engine, streams=1, tokens=64)
    rounds = [o.round for o in outs["r0"] if o.round is not None]
    assert sum(r.plain for r in rounds) > 40
    assert len(catch_ups) >= len(rounds) - 1  # eval_every 1: every round but the last


def counted_catch_ups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The evaluation's catch-ups (core/batching/step._sync_all), the requests of each."""
    import core.batching.step as step_module

    calls: list[int] = []
    sync_all = step_module._sync_all

    def counted(rows: list[object], config: object) -> None:
        calls.append(len(rows))
        sync_all(rows, config)  # type: ignore[arg-type]

    monkeypatch.setattr(step_module, "_sync_all", counted)
    return calls


def test_the_evaluation_is_charged_to_the_awake_requests_alone() -> None:
    """Issue 58, L: four requests a step, one awake; the evaluation's seconds are that one's,
    not a quarter each; and the step check charges it to the awake rows of the plan only."""
    costs = StepCosts()
    for rows in (4, 16, 4, 16):
        costs.record(StepSample(requests=4, rows=rows, verify_s=0.02 + 0.001 * rows,
                                evaluate_s=0.008 if rows > 4 else 0.001, awake=1))
    fit = costs.model(4)
    assert fit is not None
    assert (fit.evaluate, fit.evaluate_plain) == pytest.approx((0.008, 0.001))
    # one awake request drafting 9 rows for 4 tokens: 7 tokens in 0.02 + 0.012 + 0.008 s
    # against 4 in 0.02 + 0.004 + 0.001 s pays (175 against 160 tokens/s) ...
    drafting = PlannedRow(9.0, FREE, 4.0)
    assert fit.step_pays([drafting] + [PlannedRow(1.0, PLAIN, 1.0, awake=False)] * 3)
    # ... and would not were the three asleep rows charged the evaluation too
    assert not fit.step_pays([drafting] + [PlannedRow(1.0, PLAIN, 1.0)] * 3)
