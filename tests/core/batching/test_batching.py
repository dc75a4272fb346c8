"""Batched steps (issue 16): whatever the batch composition, every request's greedy output is
plain greedy decoding; target passes = steps with a round + prefill chunks; failures stay with
their request; prefill is chunked under the step's token budget; round-robin stays available."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import core.batching.scheduler
import core.batching.step
from bench.harness.tiny_models import (
    bigram_setup,
    copy_drafter,
    hf_greedy,
    make_engine,
    random_drafter,
    tiny_target,
)
from core.config import LEARNER_NAMES, SamplingParams, TreeConfig
from core.engine import RoundOutput, SpecEngine
from core.model.target import Target

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)
POLICIES = ["none", *LEARNER_NAMES, "fixed:copy", "fixed:r1"]


@pytest.fixture(scope="module")
def bigram():  # type: ignore[no-untyped-def]
    return bigram_setup(TREE, randoms=3)


@pytest.fixture(scope="module")
def llama():  # type: ignore[no-untyped-def]
    target = tiny_target("llama")
    return target, make_engine(target, {f"d{i}": random_drafter(target, seed=i) for i in range(3)},
                               TREE)


def with_config(engine: SpecEngine, **changes: object) -> SpecEngine:
    return SpecEngine(engine.target, dict(engine.snapshot.drafters),
                      replace(engine.config, **changes))


def params(n: int, **kw: object) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, ignore_eos=True, **kw)  # type: ignore[arg-type]


class Driver:
    """Steps an engine, collecting each request's tokens and outputs, counting target passes."""

    def __init__(self, engine: SpecEngine) -> None:
        self.engine = engine
        self.tokens: dict[str, list[int]] = {}
        self.outs: dict[str, list[RoundOutput]] = {}
        self.steps: list[list[str]] = []  # request ids with an output, per step
        self.rounds: list[int] = []  # outputs of a round (not of a prefill), per step
        self.forwards0 = engine.target.forward_count
        self.passes0 = self._passes()

    def add(self, rid: str, prompt: list[int], p: SamplingParams, policy: str) -> None:
        self.engine.add_request(rid, prompt, p, policy)
        self.tokens[rid], self.outs[rid] = [], []

    def step(self) -> list[RoundOutput]:
        outs = self.engine.step()
        for o in outs:
            self.tokens[o.request_id] += o.token_ids
            self.outs[o.request_id].append(o)
        self.steps.append([o.request_id for o in outs])
        self.rounds.append(sum(o.round is not None for o in outs))
        return outs

    def drain(self) -> None:
        while self.engine.has_unfinished():
            self.step()

    def _passes(self) -> int:
        b = self.engine._batch
        return b.round_passes + b.prefill_passes

    def check_forward_accounting(self) -> None:
        assert self.engine.target.forward_count - self.forwards0 == self._passes() - self.passes0


def test_staggered_mixed_batch_is_plain_greedy_for_every_request(bigram) -> None:  # type: ignore[no-untyped-def]
    """Different prompt lengths, every policy and drafter in one batch, arrivals staggered."""
    target, engine = bigram
    d = Driver(engine)
    prompts = {f"r{i}": [(7 * i + j) % 32 for j in range(1 + 3 * i)] for i in range(len(POLICIES))}
    for i, (rid, prompt) in enumerate(prompts.items()):
        d.add(rid, prompt, params(20 + 3 * i), POLICIES[i])
        d.step()  # each arrival joins a batch already running
    d.drain()
    for i, (rid, prompt) in enumerate(prompts.items()):
        assert d.tokens[rid] == hf_greedy(target, prompt, 20 + 3 * i), POLICIES[i]
        stats = d.outs[rid][-1].stats
        # one prefill pass, one pass per round (policy none: every round plain)
        assert stats.target_forwards == stats.rounds + stats.plain_rounds + 1
    assert max(len(s) for s in d.steps) >= 6, "the requests must really have shared steps"
    d.check_forward_accounting()


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
def test_random_drafters_in_a_batch_match_hf_generate(family: str) -> None:
    target = tiny_target(family, sliding_window=6)  # mistral: a window shorter than the context
    engine = make_engine(target, {f"d{i}": random_drafter(target, seed=i) for i in range(3)}, TREE)
    d = Driver(engine)
    prompts = [[5], [1, 2, 3, 4, 5, 6, 7, 8, 9], [40, 2], [11, 12, 13, 14]]
    for i, prompt in enumerate(prompts):
        d.add(f"q{i}", prompt, params(24), ("normalhedge", "fixed:d1", "exp3spec", "none")[i])
    d.drain()
    for i, prompt in enumerate(prompts):
        assert d.tokens[f"q{i}"] == hf_greedy(target, prompt, 24)
    d.check_forward_accounting()


def test_abort_mid_batch_leaves_the_others_exact(bigram) -> None:  # type: ignore[no-untyped-def]
    """Aborting a request frees its slot, and the last slot's request moves into it."""
    target, engine = bigram
    d = Driver(engine)
    prompts = {f"a{i}": [i + 1, 2 * i + 3] for i in range(5)}
    for i, (rid, prompt) in enumerate(prompts.items()):
        d.add(rid, prompt, params(30),
              ("normalhedge", "fixed:r0", "none", "fixed:copy", "ucbspec")[i])
    for _ in range(3):
        d.step()
    engine.abort("a1")  # a middle slot: a4 moves into it
    d.step()
    engine.abort("a0")
    d.drain()
    for rid in ("a2", "a3", "a4"):
        assert d.tokens[rid] == hf_greedy(target, prompts[rid], 30)
    assert engine._batch.cache.used == 0


def test_pool_change_between_steps(bigram) -> None:  # type: ignore[no-untyped-def]
    """Requests on the old and the new snapshot share steps; each keeps its own pool."""
    target, base = bigram
    engine = with_config(base)
    d = Driver(engine)
    d.add("old", [5], params(30), "fixed:copy")
    d.add("old2", [9, 1], params(30), "normalhedge")
    d.step()
    d.step()
    engine.remove_drafter("copy")
    engine.add_loaded_drafter("copy2", copy_drafter(target, perm_of(target)))
    d.add("new", [5], params(20), "fixed:copy2")
    d.add("new2", [3, 3, 3], params(20), "normalhedge")
    d.drain()
    assert d.tokens["old"] == hf_greedy(target, [5], 30)
    assert d.tokens["old2"] == hf_greedy(target, [9, 1], 30)
    assert d.tokens["new"] == hf_greedy(target, [5], 20)
    assert d.tokens["new2"] == hf_greedy(target, [3, 3, 3], 20)
    assert set(d.outs["old"][-1].stats.drafter_per_round) == {"copy"}
    assert "copy" not in d.outs["new2"][-1].stats.drafter_ids
    d.check_forward_accounting()


def perm_of(target: torch.nn.Module) -> list[int]:
    """The bigram target's permutation, read back from its lm_head (column x peaks at perm[x])."""
    return target.lm_head.weight.argmax(dim=0).tolist()  # type: ignore[union-attr,operator]


def test_long_prompt_is_prefilled_in_chunks_without_stalling_the_running(bigram) -> None:  # type: ignore[no-untyped-def]
    target, base = bigram
    # 3 rows of 11 tree tokens; chunks get the 7 left, raised to a quarter of the budget (10)
    engine = with_config(base, max_step_tokens=3 * (TREE.total_tokens + 1) + 7)
    d = Driver(engine)
    for i in range(3):
        d.add(f"run{i}", [i + 4], params(60), "fixed:copy" if i else "normalhedge")
    d.step()
    d.step()
    long_prompt = [(5 * j + 1) % 32 for j in range(70)]
    d.add("long", long_prompt, params(10, prompt_logprobs=1), "normalhedge")
    start = len(d.steps)
    while not d.outs["long"]:
        d.step()
    chunks = len(d.steps) - start
    assert chunks == 7, "the prompt is prefilled in 10-token chunks, one per step"
    for outs in d.steps[start:]:
        assert {"run0", "run1", "run2"} <= set(outs), "a running stream stalled during the prefill"
    d.drain()
    assert d.tokens["long"] == hf_greedy(target, long_prompt, 10)
    stats = d.outs["long"][-1].stats
    assert stats.target_forwards == stats.rounds + chunks
    lps = d.outs["long"][0].prompt_logprobs
    assert lps is not None and len(lps) == len(long_prompt) and lps[0] is None
    with torch.no_grad():
        ref = torch.log_softmax(target(torch.tensor([long_prompt])).logits[0].float(), dim=-1)
    for j in range(1, len(long_prompt)):
        assert lps[j] is not None and lps[j].token_id == long_prompt[j]  # type: ignore[union-attr]
        assert lps[j].logprob == pytest.approx(float(ref[j - 1, long_prompt[j]]), abs=1e-4)  # type: ignore[union-attr]
    d.check_forward_accounting()


def test_max_running_and_the_token_budget_bound_the_batch(bigram) -> None:  # type: ignore[no-untyped-def]
    target, base = bigram
    engine = with_config(base, max_running=3, max_step_tokens=2 * (TREE.total_tokens + 1))
    d = Driver(engine)
    prompts = {f"m{i}": [i, i + 1] for i in range(5)}
    for rid, prompt in prompts.items():
        d.add(rid, prompt, params(16), "fixed:copy")
    d.drain()
    assert max(len(s) for s in d.steps) <= 3  # max_running
    assert max(d.rounds) == 2  # the budget holds two trees
    for rid, prompt in prompts.items():
        assert d.tokens[rid] == hf_greedy(target, prompt, 16)
    # arrival order: the last two only start once the first ones finish
    first_out = {rid: next(i for i, s in enumerate(d.steps) if rid in s) for rid in prompts}
    assert first_out["m3"] > first_out["m0"] and first_out["m4"] > first_out["m1"]


def test_greedy_stats_are_the_same_alone_and_in_a_batch(bigram) -> None:  # type: ignore[no-untyped-def]
    """Per-request statistics and regret keep their meaning: a request's rounds, choices,
    weights, accepted lengths, estimates and regret are those of the round-robin engine,
    whoever shares its steps."""
    _, base = bigram
    p = params(40, seed=3)
    runs = []
    for others in (0, 3):  # alone in today's round-robin engine, then in a batch of four
        d = Driver(with_config(base, evaluate_all=True, batching=others > 0))
        d.add("me", [4, 9, 2], p, "normalhedge")
        for i, pol in enumerate(("fixed:r2", "none", "exp3spec")[:others]):
            d.add(f"other{i}", [i + 1] * (i + 2), params(25), pol)
        d.drain()
        runs.append(d.outs["me"])
    alone, batched = (outs[-1].stats for outs in runs)
    assert ([o.round.weights for o in runs[1] if o.round]
            == [o.round.weights for o in runs[0] if o.round])
    for field in ("drafter_per_round", "accepted_per_round", "completion_tokens",
                  "num_draft_tokens", "target_forwards", "rounds"):
        assert getattr(batched, field) == getattr(alone, field), field
    assert batched.regret_curve == pytest.approx(alone.regret_curve)
    assert [r for _, r in batched.estimates] == [r for _, r in alone.estimates]
    assert [e for e, _ in batched.estimates] == pytest.approx([e for e, _ in alone.estimates])
    assert alone.target_forwards == alone.rounds + 1 and len(alone.estimates) >= alone.rounds - 1


def test_round_robin_switch_keeps_todays_engine(llama) -> None:  # type: ignore[no-untyped-def]
    target, base = llama
    engine = with_config(base, batching=False)
    d = Driver(engine)
    for i in range(3):
        d.add(f"rr{i}", [i + 2, 7], params(12), ("normalhedge", "none", "fixed:d2")[i])
    d.drain()
    assert all(len(s) == 1 for s in d.steps)  # one request's round per step
    assert [s[0] for s in d.steps[:6]] == ["rr0", "rr1", "rr2"] * 2  # in turn
    for i in range(3):
        assert d.tokens[f"rr{i}"] == hf_greedy(target, [i + 2, 7], 12)
    assert engine._batch.round_passes == sum(len(s) for s in d.steps) - 3  # 3 prefills


# -- failures -------------------------------------------------------------------------------------
def _raise_for(bad: str, real):  # type: ignore[no-untyped-def]
    def wrapped(state, *args, **kwargs):  # type: ignore[no-untyped-def]
        if state.request_id == bad:
            raise RuntimeError("boom")
        return real(state, *args, **kwargs)
    return wrapped


def _failure_run(engine: SpecEngine, target: torch.nn.Module) -> Driver:
    d = Driver(engine)
    for i, pol in enumerate(("normalhedge", "fixed:copy", "fixed:r0", "none")):
        d.add(f"f{i}", [i + 3, 1], params(14), pol)
    d.add("bad", [1, 2], params(14), "fixed:copy")
    d.drain()
    assert d.outs["bad"][-1].finish_reason == "error" and "boom" in (d.outs["bad"][-1].error or "")
    for i in range(4):
        assert d.tokens[f"f{i}"] == hf_greedy(target, [i + 3, 1], 14)
    return d


def test_a_failing_row_fails_only_its_request(bigram, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    target, base = bigram
    monkeypatch.setattr(core.batching.step, "verify_tree",
                        _raise_for("bad", core.batching.step.verify_tree))
    _failure_run(with_config(base), target)


def test_a_failing_shared_pass_is_retried_row_by_row(bigram, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The target pass raises whenever the bad request's row is in it: the batch is rerun
    request by request, and only the bad request fails."""
    target, base = bigram
    engine = with_config(base)
    real = Target.forward_rows

    def flaky(self, cache, slots, tokens, positions, trees, **kwargs):  # type: ignore[no-untyped-def]
        if trees[0] is not None and engine._batch.slot_of("bad") in slots:  # a verification pass
            raise RuntimeError("boom")
        return real(self, cache, slots, tokens, positions, trees, **kwargs)

    monkeypatch.setattr(Target, "forward_rows", flaky)
    d = _failure_run(engine, target)
    assert max(len(s) for s in d.steps) >= 4, "the good requests must still share steps"


def test_a_failing_prefill_pass_fails_only_its_request(bigram, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The shared prefill pass raises whenever the bad prompt is in it: the chunks are rerun one
    by one and only the bad request fails."""
    target, base = bigram
    real = core.batching.scheduler.forward_chunks

    def flaky(target, cache, chunks, *args):  # type: ignore[no-untyped-def]
        if any(c.state.request_id == "bad" for c in chunks):
            raise RuntimeError("boom")
        return real(target, cache, chunks, *args)

    monkeypatch.setattr(core.batching.scheduler, "forward_chunks", flaky)
    _failure_run(with_config(base), target)


def test_a_failing_chunk_after_the_pass_fails_only_its_request(bigram, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    target, base = bigram
    real = core.batching.scheduler.finish_chunk

    def flaky(cache, chunk, out, config):  # type: ignore[no-untyped-def]
        if chunk.state.request_id == "bad":
            raise RuntimeError("boom")
        return real(cache, chunk, out, config)

    monkeypatch.setattr(core.batching.scheduler, "finish_chunk", flaky)
    _failure_run(with_config(base), target)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_a_burst_of_prompts_shares_one_prefill_pass(family: str) -> None:
    """Five prompts of different lengths arriving together are prefilled in one target pass
    (one row each), and every request's output is still plain greedy decoding."""
    target = tiny_target(family)
    engine = make_engine(target, {f"d{i}": random_drafter(target, seed=i) for i in range(2)}, TREE)
    d = Driver(engine)
    prompts = [[(5 * i + j) % 40 + 1 for j in range(2 + 4 * i)] for i in range(5)]
    for i, prompt in enumerate(prompts):
        d.add(f"b{i}", prompt, params(12), ("normalhedge", "fixed:d1", "none", "exp3spec",
                                            "fixed:d0")[i])
    before = engine.target.forward_count
    first = d.step()
    assert engine.target.forward_count - before == 1
    assert sorted(o.request_id for o in first) == [f"b{i}" for i in range(5)]
    second = d.step()  # every request's tree in one verification pass
    assert [o.round.batch_rows for o in second if o.round is not None] == [5] * 5
    d.drain()
    for i, prompt in enumerate(prompts):
        assert d.tokens[f"b{i}"] == hf_greedy(target, prompt, 12)
    d.check_forward_accounting()


def test_prompt_logprobs_take_a_pass_of_their_own(bigram) -> None:  # type: ignore[no-untyped-def]
    """A prompt that wants its logprobs needs all of its logits; the others keep their last."""
    target, engine = bigram
    d = Driver(engine)
    d.add("plain0", [3, 4, 5], params(6), "normalhedge")
    d.add("lp", [6, 7, 8, 9], params(6, prompt_logprobs=1), "normalhedge")
    d.add("plain1", [10, 11], params(6), "none")
    before, passes = engine.target.forward_count, engine._batch.prefill_passes
    d.step()
    assert engine.target.forward_count - before == engine._batch.prefill_passes - passes == 2
    d.drain()
    assert d.tokens["lp"] == hf_greedy(target, [6, 7, 8, 9], 6)
    lps = d.outs["lp"][0].prompt_logprobs
    assert lps is not None and len(lps) == 4 and lps[0] is None and all(lps[1:])
    d.check_forward_accounting()


@pytest.mark.parametrize("policy", ["normalhedge", "fixed:d2"])
def test_chunked_prefill_feeds_the_drafters_like_one_pass(llama, policy: str) -> None:
    """The drafters' state after a prompt prefilled in chunks equals the state after
    one pass (the greedy output alone cannot tell: drafts never change it). Alone in the
    engine, a prompt gets the whole step budget: 8-token chunks."""
    _, base = llama
    prompt = [(3 * j + 2) % 64 for j in range(40)]
    states = []
    for budget in (4096, 8):
        engine = with_config(base, max_step_tokens=budget)
        engine.add_request("p", prompt, params(8), policy)
        while not engine.step():
            pass
        states.append(engine._requests["p"])
    one, chunked = states
    assert one.stats.target_forwards == 1 and chunked.stats.target_forwards == 5
    assert one.token_ids == chunked.token_ids
    index = 2 if policy.startswith("fixed") else 0
    assert one.dstate is not None and chunked.dstate is not None
    if one.pending is not None:
        assert chunked.pending is not None
        assert torch.equal(chunked.pending.topk_ids[:, -1], one.pending.topk_ids[:, -1])
    chunked.dstate.sync(chunked.snapshot, 3, [index])
    one.dstate.sync(one.snapshot, 3, [index])
    torch.testing.assert_close(chunked.dstate.h_last(index), one.dstate.h_last(index), atol=1e-4,
                               rtol=1e-4)
    torch.testing.assert_close(chunked.dstate.drafter_kv(index)[0], one.dstate.drafter_kv(index)[0],
                               atol=1e-4, rtol=1e-4)


def test_grammar_and_penalties_inside_a_batch() -> None:
    """Constrained and penalised requests share steps with plain ones; each still equals its
    own plain (constrained / penalised) greedy decoding."""
    from tests.core.speculation.test_grammar import (
        JSON_SPEC,
        engine_with_tokenizer,
        plain_constrained_greedy,
    )
    from tests.core.speculation.test_penalties import PEN, plain_penalised_greedy
    from tests.core.tiny_tokenizer import char_tokenizer

    tok = char_tokenizer()
    target, engine = engine_with_tokenizer(tok)
    d = Driver(engine)
    jobs = {
        "json1": (tok.encode("Give JSON"), SamplingParams(max_new_tokens=60, grammar=JSON_SPEC),
                  "normalhedge"),
        "json2": (tok.encode("x"), SamplingParams(max_new_tokens=60, grammar=JSON_SPEC),
                  "fixed:d1"),
        "pen": (tok.encode("abc"), params(20, penalties=PEN), "exp3spec"),
        "plain": (tok.encode("hello"), params(20), "normalhedge"),
    }
    for rid, (prompt, p, policy) in jobs.items():
        d.add(rid, prompt, p, policy)
    d.drain()
    for rid in ("json1", "json2"):
        prompt = jobs[rid][0]
        assert d.tokens[rid] == plain_constrained_greedy(target, tok, prompt, 60, JSON_SPEC), rid
        assert d.outs[rid][-1].finish_reason == "stop"
    assert d.tokens["pen"] == plain_penalised_greedy(target, jobs["pen"][0], 20, PEN)
    assert d.tokens["plain"] == hf_greedy(target, jobs["plain"][0], 20)
    assert max(len(s) for s in d.steps) == 4
