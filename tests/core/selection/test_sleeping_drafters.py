"""Sleeping EAGLE-3 drafters (core/selection/arm_policy.py, SLEEP_SHARE): under the time loss a
request whose learner has left its EAGLE-3 drafters stops feeding them, they are asleep experts
meanwhile, and every PROBE_ROUNDS rounds they restart from the last WAKE_PAIRS verified pairs.
Tokens never depend on it; the learner never sees a window the drafters could not finish."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

import core.batching.step as step_module
import core.selection.arm_costs as arm_costs
import core.selection.arm_policy as arm_policy
from bench.harness.tiny_models import random_drafter, tiny_target
from core.config import SamplingParams
from core.decoding.request import RequestState
from core.engine import SpecEngine
from core.model.kv_buffer import KVBuffer
from core.model.stacked_drafters import CatchUpJob, StackedGroup
from core.selection.arm_costs import NEURAL, CostModel, Start, StepCosts
from core.selection.arm_policy import ArmPolicy
from core.selection.feedback import FeedbackQueue, WindowLoss
from core.speculation.drafter_pool import WAKE_PAIRS, DrafterState, PoolSnapshot
from core.speculation.model_free.kinds import make_model_free
from tests.core.selection.test_time_loss import counted_catch_ups, ids, run, time_engine
from tests.modelled_clock import ModelledClock, slowed_rows

# -- the drafters' caches ----------------------------------------------------------------------


def pairs(target_hidden: int, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(count, 3 * target_hidden, generator=gen),
            torch.randint(0, 64, (count,), generator=gen))


def test_a_woken_drafter_continues_its_cache_past_a_gap_at_the_right_positions() -> None:
    """Asleep, the pairs are not consumed; awake again, each drafter's cache holds the pairs it
    consumed before, then the last WAKE_PAIRS at their own positions: exactly a catch-up over
    those two stretches, and the draft cache's length counts consumed pairs, not positions."""
    target = tiny_target()
    snapshot = PoolSnapshot({f"d{i}": random_drafter(target, seed=i) for i in range(2)})
    group = snapshot.groups[0]
    hidden = target.config.hidden_size
    before, asleep = pairs(hidden, 10, 1), pairs(hidden, 30, 2)
    state = DrafterState(snapshot, full=True)
    state.record(*before)
    state.sync(snapshot, top_k=3)
    state.sleep()
    for j in range(30):  # one verified pair a plain round
        state.record(asleep[0][j : j + 1], asleep[1][j : j + 1])
    assert state.held_pairs == WAKE_PAIRS
    state.wake()
    got = state.sync(snapshot, top_k=3)
    assert got is not None and got.topk_ids.shape[1] == WAKE_PAIRS

    kv = group.empty_kv()
    group.catch_up_many([CatchUpJob(kv, before[0], before[1], torch.arange(10))], 3)
    skip = 30 - WAKE_PAIRS
    want = group.catch_up_many([CatchUpJob(kv, asleep[0][skip:], asleep[1][skip:],
                                           torch.arange(10 + skip, 40))], 3)[0]
    assert torch.equal(got.topk_ids, want.topk_ids)
    assert torch.allclose(got.topk_logp, want.topk_logp)
    assert torch.equal(state.h_last(0), want.h_last[0])
    _, _, length = state.draft_cache(0, scratch=4)
    assert length == 10 + WAKE_PAIRS


def test_asleep_drafters_cannot_be_caught_up() -> None:
    target = tiny_target()
    snapshot = PoolSnapshot({"d0": random_drafter(target)})
    state = DrafterState(snapshot, full=True)
    state.record(*pairs(target.config.hidden_size, 4, 1))
    state.sync(snapshot, top_k=3)
    state.sleep()
    with pytest.raises(AssertionError, match="wake"):
        state.sync(snapshot, top_k=3)
    assert isinstance(state.units[0].kv, KVBuffer)


# -- in the engine ---------------------------------------------------------------------------------


def test_a_learner_decoding_plain_stops_feeding_its_drafters_but_for_probes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No drafter pays (two random ones), though none is dominated (a pass costs 20 rows):
    the learner goes plain, its drafters fall asleep, and only the probes (every PROBE_ROUNDS
    rounds) catch them up again; the learner still sees them after each probe."""
    monkeypatch.setattr(arm_policy, "PROBE_ROUNDS", 16)
    catch_ups = counted_catch_ups(monkeypatch)
    engine = random_pool_engine("time")
    slowed_rows(engine, per_call_s=0.01, per_row_s=0.0005)
    outs = run(engine, streams=1, tokens=128)
    stats = outs["r0"][-1].stats
    rounds = stats.rounds + stats.plain_rounds
    assert stats.asleep_rounds > rounds / 3
    assert stats.wakes >= 3
    # awake: every round (eval_every 1); asleep: the one evaluation after each wake
    assert len(catch_ups) <= rounds - stats.asleep_rounds + stats.wakes + 1 < rounds
    assert ids(outs) == ids(run(random_pool_engine("length"), streams=1, tokens=128))


def random_pool_engine(loss: str) -> SpecEngine:
    """time_engine's pool without its copy drafter: two drafters that rarely pay."""
    engine = time_engine(loss)
    drafters = {d: m for d, m in engine.snapshot.drafters.items() if d != "copy"}
    return SpecEngine(engine.target, drafters, engine.config, clock=ModelledClock())


def test_woken_drafters_draft_again_and_the_tokens_stay_the_targets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Put to sleep while the copy drafter pays (forced), its regret frozen meanwhile: woken
    by a probe it drafts again from its restarted cache, and greedy output is unchanged."""
    monkeypatch.setattr(arm_policy, "PROBE_ROUNDS", 8)
    slept = []
    should_sleep = ArmPolicy.should_sleep

    def once(self: ArmPolicy, fed: bool) -> bool:
        if not slept and self.awake_rounds >= 6 and self.plain_arm and fed:
            slept.append(self.awake_rounds)
            return True
        return should_sleep(self, fed)

    monkeypatch.setattr(ArmPolicy, "should_sleep", once)
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.01, per_row_s=0.0)  # memory-bound: the copy drafter pays
    outs = run(engine, streams=1, tokens=96)
    rounds = [o.round for o in outs["r0"] if o.round is not None]
    stats = outs["r0"][-1].stats
    assert slept and stats.wakes >= 1 and stats.asleep_rounds >= 8
    asleep_from = next(i for i, o in enumerate(outs["r0"]) if o.stats.asleep_rounds > 0)
    later = [r.drafter for r in rounds[asleep_from + 8 + 2:]]
    assert later.count("copy") >= 3  # drafting again after the wake
    assert ids(outs) == ids(run(time_engine("length"), streams=1, tokens=96))


def windows_learned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, WindowLoss]]:
    """Record every window the learners are handed, with its start."""
    seen: list[tuple[int, WindowLoss]] = []
    pop = FeedbackQueue.pop_losses

    def recording(self: FeedbackQueue) -> list[WindowLoss]:
        starts = [p.start for p in self._pending if not p.learned]
        out = pop(self)
        seen.extend(zip(starts, out, strict=False))
        return out

    monkeypatch.setattr(FeedbackQueue, "pop_losses", recording)
    return seen


def test_windows_the_drafters_cannot_finish_have_them_asleep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every round plain (so two runs root their windows at the same positions); one run's
    drafters fall asleep at an evaluation. Each window in which a drafter is awake must judge it
    exactly as the run that never sleeps does (no window cut short by the sleep, which would
    count γ = 0 past it), and the windows rooted up to the sleep keep it awake."""
    monkeypatch.setattr(RequestState, "select", lambda self: None)
    monkeypatch.setattr(arm_policy, "PROBE_ROUNDS", 1 << 20)
    runs = {}
    for sleeps in (False, True):
        # a round commits one token here: round 19 is the one after the 20th token
        def decide(self: ArmPolicy, fed: bool, sleeps: bool = sleeps) -> bool:
            return sleeps and self.awake_rounds >= 19 and fed

        monkeypatch.setattr(ArmPolicy, "should_sleep", decide)
        seen = windows_learned(monkeypatch)
        engine = time_engine()
        run(engine, streams=1, tokens=48)
        runs[sleeps] = {start: w for start, w in seen}
    awake, asleep = runs[False], runs[True]
    drafters = [0, 1, 2]
    judged = [s for s, w in asleep.items() if w.awake[drafters].any()]
    assert judged and max(judged) >= 18
    for s in judged:
        np.testing.assert_allclose(asleep[s].est_len[drafters], awake[s].est_len[drafters])
    assert any(not w.awake[drafters].any() for w in asleep.values())


# -- dominated by plain decoding -------------------------------------------------------------------


def test_an_arm_that_cannot_beat_plain_decoding_even_committing_its_most_is_dominated() -> None:
    # compute-bound (rows dear): a 13-row tree costs 13 rows, 0.027 s a round with its
    # drafting, more than 5 plain rounds (0.010 s)
    dear = CostModel(requests=4, alpha=0.0, beta=0.002, neural=0.001, free=0.0, evaluate=0.0,
                     evaluate_plain=0.0, other=0.0)
    assert dear.dominated(13.0, NEURAL, 5.0)
    assert dear.dominated(13.0, NEURAL, 13.0)
    assert not dear.dominated(13.0, NEURAL, 14.0)  # 14 tokens would pay for it
    # memory-bound (the pass is a pass): 5 tokens for 0.0159 s against 0.0101 s for one
    cheap = replace(dear, alpha=0.04, beta=0.0001)
    assert not cheap.dominated(13.0, NEURAL, 5.0)


def test_where_plain_decoding_dominates_new_requests_never_feed_their_drafters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the engine has measured a step size where a tree's rows cost more than its most
    tokens, requests that start there skip their drafters' prompt catch-up and keep them
    asleep; their tokens are the target's."""
    engine = time_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    run(engine, streams=4, tokens=48)  # the bucket of 4 measured
    catch_ups: list[int] = []
    real = StackedGroup.catch_up_many

    def counting(self: StackedGroup, jobs: list[CatchUpJob], top_k: int,
                 rows: slice | None = None) -> list[object]:
        catch_ups.append(sum(j.tokens.numel() for j in jobs))
        return real(self, jobs, top_k, rows)  # type: ignore[return-value]

    monkeypatch.setattr(StackedGroup, "catch_up_many", counting)
    outs = run(engine, streams=4, tokens=48)
    assert catch_ups == []
    for o in outs.values():
        stats = o[-1].stats
        # every round but the last, which ends the request unscored
        assert stats.asleep_rounds == stats.rounds + stats.plain_rounds - 1 > 40
    assert ids(outs) == ids(run(time_engine("length"), streams=4, tokens=48))


# -- the whole pool asleep -----------------------------------------------------------------------


def free_pool_engine(loss: str = "time") -> SpecEngine:
    """Two random EAGLE-3 drafters, an ngram and a suffix member over the bigram target, on a
    modelled clock: a pool with both kinds to put to sleep."""
    engine = time_engine(loss)
    members = {"r0": engine.snapshot.drafters["r0"], "r1": engine.snapshot.drafters["r1"],
               "ngram": make_model_free("ngram"), "suffix": make_model_free("suffix")}
    return SpecEngine(engine.target, members, engine.config, clock=ModelledClock())


def counted_windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    opened: list[int] = []
    real = FeedbackQueue.open_window

    def counting(self: FeedbackQueue, start: int, chosen: int | None,
                 realised: int | None, costs: np.ndarray | None = None) -> None:
        opened.append(start)
        real(self, start, chosen, realised, costs)

    monkeypatch.setattr(FeedbackQueue, "open_window", counting)
    return opened


def test_where_no_drafter_pays_the_whole_pool_sleeps_and_nothing_is_evaluated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows dear and random text (nothing to copy): the learner leaves every drafter, the pool
    sleeps, and its rounds open no window, index and record nothing and feed no drafter until a
    probe; the probe indexes what was committed meanwhile, and after it the learner scores
    them again (windows open, the lookups record)."""
    monkeypatch.setattr(arm_policy, "PROBE_ROUNDS", 48)
    opened = counted_windows(monkeypatch)
    engine = free_pool_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    params = SamplingParams(max_new_tokens=160, ignore_eos=True)
    engine.add_request("r", [3, 1, 4, 1, 5], params, "normalhedge")
    asleep, outs, quiet = [], [], 0
    while engine.has_unfinished():
        state = engine._requests["r"]
        before, windows = state.asleep, len(opened)
        indexed = state.lookups.indexed if state.lookups is not None else 0
        outs += engine.step()
        assert state.lookups is not None
        if before and state.asleep:  # a step run asleep throughout
            assert len(opened) == windows and state.lookups.indexed == indexed
            assert not any(state.lookups.guesses.values())
            quiet += 1
        elif before:  # the probe: every committed token indexed, the lookups' guesses again
            assert state.lookups.indexed == len(state.token_ids)
            fresh = {i: d.start(list(state.token_ids)).guess()  # one go over every token
                     for i, d in state.lookups.drafters.items()}
            assert {i: lk.guess() for i, lk in state.lookups.lookups.items()} == fresh
        asleep.append(state.asleep)
    stats = outs[-1].stats
    assert stats.wakes >= 1 and quiet > 80
    first = asleep.index(True)
    woke = next(i for i in range(first, len(asleep)) if not asleep[i])
    assert first < 40 and woke - first >= 48  # PROBE_ROUNDS
    assert max(opened) > woke  # windows again after the probe
    reference = free_pool_engine("length")
    ids_ref = reference.generate_ids([3, 1, 4, 1, 5], params, "normalhedge")[0]
    assert [t for o in outs for t in o.token_ids] == ids_ref


def start_group(engine: SpecEngine, tag: str) -> list[Start]:
    """Four requests added together and prefilled: the levels they started at."""
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for i in range(4):
        engine.add_request(f"{tag}{i}", [3, 1, 4, 2 + i, 5], params, "normalhedge")
    engine.step()  # the prefill
    return sorted(s.arms.start for s in engine._requests.values() if s.arms is not None)


def test_each_level_is_tried_by_one_request_and_where_both_lost_time_requests_start_asleep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows dear and an evaluation that costs more than the lookups save: of four requests
    starting together at 4 streams, one tries every member awake, one the model-free members
    alone (the EAGLE-3 drafters asleep throughout, no prompt catch-up) and the others start
    asleep; once both tries lost time, the next group starts asleep. No request fails on the
    way (the windows a sleep left open close)."""
    engine = free_pool_engine()
    slowed_rows(engine, per_call_s=0.0, per_row_s=0.002)
    priced_evaluation(monkeypatch, engine, 0.2, "_learn")  # more than the lookups save
    assert start_group(engine, "f") == [Start.AWAKE, Start.MODEL_FREE, Start.ASLEEP, Start.ASLEEP]
    while engine.has_unfinished():
        assert all(s.drafters_asleep for s in engine._requests.values()
                   if s.arms is not None and s.arms.start is Start.MODEL_FREE)
        assert not any(o.error for o in engine.step())
    assert start_group(engine, "a") == [Start.ASLEEP] * 4
    assert all(s.asleep for s in engine._requests.values())


def priced_evaluation(monkeypatch: pytest.MonkeyPatch, engine: SpecEngine, seconds: float,
                      phase: str = "_sync_all") -> None:
    """Each call of an evaluation `phase` in core/batching/step.py (the EAGLE-3 drafters'
    catch-up, or a row's learning) for a request whose pool is awake costs `seconds` on the
    engine's modelled clock (which only the target's passes advance otherwise); a pool asleep
    learns nothing (core/decoding/request_round.learn_from returns at once)."""
    clock, real = engine.clock, getattr(step_module, phase)
    assert isinstance(clock, ModelledClock)

    def priced(*args: Any) -> None:
        rows = args[0] if isinstance(args[0], list) else [args[0]]
        if any(not r.state.asleep for r in rows):
            clock.advance(seconds)
        real(*args)

    monkeypatch.setattr(step_module, phase, priced)


@pytest.mark.parametrize(("evaluation_s", "starts_asleep"),
                         [(0.0, [False, False, False, False]), (1.0, [True, True, True, True])])
def test_the_next_requests_start_asleep_where_the_evaluation_cost_more_than_drafting_saved(
        monkeypatch: pytest.MonkeyPatch, evaluation_s: float, starts_asleep: list[bool]) -> None:
    """The copy drafter pays where rows are cheap: with an evaluation that costs nothing the
    requests that learned saved time and the next group starts awake; where each evaluation
    phase costs a second (the catch-up of many drafters on a slow CPU), starting awake lost
    time and the next group starts asleep (the level's next try 2 x PROBE_REQUESTS starts
    after the one that lost)."""
    engine = time_engine("time")
    slowed_rows(engine, per_call_s=0.02, per_row_s=0.0002)  # a tree among plain rows pays
    priced_evaluation(monkeypatch, engine, evaluation_s)
    monkeypatch.setattr(arm_costs, "PROBE_REQUESTS", 4)
    first = run(engine, streams=4, tokens=96)
    assert any(o.round is not None and o.round.drafter == "copy" for os in first.values()
               for o in os)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for i in range(4):
        engine.add_request(f"n{i}", [3, 1, 4, 2 + i, 5], params, "normalhedge")
    engine.step()  # the prefill
    assert [s.asleep for s in engine._requests.values()] == starts_asleep


def test_a_requests_saving_is_its_steps_measured_time_against_sleeping_pools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of four plain rows costs 22 ms (5.5 ms a token), one of four copy trees 46 ms
    and its evaluation 80 ms (6.3 ms a token at five tokens a tree): starting awake lost time
    and the next group starts asleep. A saving summed from the
    rounds' modelled costs priced a drafting round's tokens at a plain row padded to its
    neighbours' trees (13 rows' worth) and credited each request +0.34 s: the next group
    started awake (on two cores, starts at two streams reported +0.2 to +0.9 s a request
    while their passes ran 0.85x plain decoding)."""
    engine = time_engine("time")
    slowed_rows(engine, per_call_s=0.02, per_row_s=0.0005)
    priced_evaluation(monkeypatch, engine, 0.08)
    monkeypatch.setattr(arm_costs, "PROBE_REQUESTS", 4)
    run(engine, streams=4, tokens=96)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for i in range(4):
        engine.add_request(f"n{i}", [3, 1, 4, 2 + i, 5], params, "normalhedge")
    engine.step()  # the prefill
    assert all(s.asleep for s in engine._requests.values())


def test_a_request_starts_at_the_level_whose_last_starts_saved_most() -> None:
    """Each level is tried by one request first (the others start asleep meanwhile), then the
    one whose last requests saved most on average is taken (asleep where none saved), the
    others tried again after their gap. Savings are weighed, not counted: one request that
    saved a second outweighs three that lost a little (at one stream the few requests whose
    answer copies the prompt are where a lookup pays). Each step size has its own memory."""
    costs = StepCosts()
    levels = [Start.AWAKE, Start.MODEL_FREE, Start.ASLEEP]
    assert costs.start(16, levels) is Start.AWAKE  # nothing known: the most awake is tried
    assert costs.start(16, levels) is Start.MODEL_FREE  # the next, while the first try runs
    assert costs.start(16, levels) is Start.ASLEEP  # both tried, nothing known yet
    costs.note_end(16, Start.AWAKE, -0.1)
    costs.note_end(16, Start.MODEL_FREE, 0.2)
    starts = [costs.start(16, levels) for _ in range(2 * arm_costs.PROBE_REQUESTS)]
    assert starts.count(Start.MODEL_FREE) == 2 * arm_costs.PROBE_REQUESTS - 1
    assert starts.count(Start.AWAKE) == 1  # its next try, 2 x PROBE_REQUESTS after one lost
    for saving in (0.8, -0.1, -0.1):  # 0.125 on average, against 0.2
        costs.note_end(16, Start.AWAKE, saving)
    assert costs.start(16, levels) is Start.MODEL_FREE
    costs.note_end(16, Start.AWAKE, 0.6)  # 0.22 on average
    assert costs.start(16, levels) is Start.AWAKE
    assert costs.start(4, levels) is Start.AWAKE  # bucket 4: nothing known
    for _ in range(arm_costs.ENDINGS):
        costs.note_end(16, Start.AWAKE, -0.01)
    assert costs.start(16, levels) is Start.MODEL_FREE  # the old savings left the memory


def test_a_level_that_keeps_losing_is_tried_ever_less_often_until_one_try_saves() -> None:
    """The gap between tries of a level doubles with each ending there that lost, from
    PROBE_REQUESTS to MAX_PROBE_GAP starts; one that saved brings it back to PROBE_REQUESTS
    (here without making the level the best: its mean is still negative)."""
    costs = StepCosts()
    levels = [Start.MODEL_FREE, Start.ASLEEP]
    tries, n = [], 0
    while len(tries) < 7:
        n += 1
        if costs.start(8, levels) is Start.MODEL_FREE:
            tries.append(n)
            costs.note_end(8, Start.MODEL_FREE, -0.1)
    p, top = arm_costs.PROBE_REQUESTS, arm_costs.MAX_PROBE_GAP
    assert np.diff(tries).tolist() == [2 * p, 4 * p, top, top, top, top]
    costs.note_end(8, Start.MODEL_FREE, 0.05)  # mean still below 0
    later = [costs.start(8, levels) for _ in range(top)]
    assert later.index(Start.MODEL_FREE) == p - 1  # the gap back to PROBE_REQUESTS


def test_members_put_to_sleep_in_two_groups_are_both_asleep_in_the_windows_both_reach() -> None:
    """The pool sleeps by depth groups (EAGLE-3 drafters of depth 4, a chain of depth 8): a
    window rooted where neither could finish must have both asleep, not only the last group."""
    queue = FeedbackQueue(3, 8, loss="time", depths=[4, 4, 8])
    for m in range(12):
        queue.open_window(m, None, 1)
    queue.add_gammas(0, np.full((3, 12), 0.5))
    queue.asleep_from([0, 1], 12 - 4 + 1)  # EAGLE-3: windows rooted at 9 on
    queue.asleep_from([2], 12 - 8 + 1)  # the chain: windows rooted at 5 on
    awake = {p.start: queue._verdict(p).awake for p in queue._pending}
    assert awake[4].tolist() == [True, True, True]
    assert awake[6].tolist() == [True, True, False]
    assert awake[10].tolist() == [False, False, False]


def test_a_window_is_final_once_its_awake_members_levels_are_known() -> None:
    """A pool asleep adds no evidence: a window whose chain (depth 8) went to sleep is final
    once its EAGLE-3 drafters' 4 levels are known, and the later windows follow it. Held for
    the queue's depth, the windows stayed open and the probe that woke the pool failed the
    request ("windows still open")."""
    queue = FeedbackQueue(3, 8, loss="time", depths=[4, 4, 8])
    for m in range(8):
        queue.open_window(m, None, 1)
    queue.add_gammas(0, np.full((3, 8), 0.5))
    queue.asleep_from([2], 8 - 8 + 1)  # the chain sleeps: windows rooted at 1 on
    queue.asleep_from([0, 1], 8 - 4 + 1)  # then the EAGLE-3 drafters: windows rooted at 5 on
    assert [w.start for w in queue.pop_completed()] == list(range(8))
    queue.restart()  # the probe: nothing open
