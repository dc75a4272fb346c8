"""Grammar fast-forward (core/speculation/model_free/forced.py): the `grammar` member drafts the
tokens a request's grammar forces, sleeps when it forces none, keeps greedy output the constrained
target's, is judged exactly by the evaluation, and leaves sampling on the constrained law."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from bench.harness.tiny_models import AUX, make_engine, random_drafter, tiny_target
from core.config import GrammarSpec, SamplingParams, TreeConfig
from core.engine import SpecEngine
from core.model.target import Target
from core.speculation.grammar import GrammarCompiler
from core.speculation.model_free.base import OutputGrammar
from core.speculation.model_free.forced import GrammarDrafter
from core.speculation.model_free.kinds import make_model_free
from core.speculation.model_free.lookups import RequestLookups
from core.speculation.model_free.trees import propose
from tests.core.speculation.test_grammar import (
    JSON_SPEC,
    exact_constrained_law,
    plain_constrained_greedy,
)
from tests.core.speculation.test_sampling_lossless import null_tv_quantile, tv
from tests.core.test_model_free_engine import windows_of
from tests.core.tiny_tokenizer import char_tokenizer

TREE = TreeConfig(top_k=3, depth=4, total_tokens=12)


def lookup_after(output: str, prompt: str = "Give JSON"):  # type: ignore[no-untyped-def]
    """A grammar member's lookup over prompt + output, started as the engine starts it (after
    the first output token) and then fed the rest."""
    tok = char_tokenizer()
    matcher = GrammarCompiler(tok, len(tok), [0]).matcher(JSON_SPEC)
    prompt_ids, out_ids = tok.encode(prompt), tok.encode(output)
    matcher.commit(out_ids[:1])
    drafter = GrammarDrafter()
    lookup = drafter.start(prompt_ids, OutputGrammar(matcher, len(prompt_ids) + 1))
    lookup.extend(out_ids)
    return tok, drafter, lookup


def test_the_chain_is_the_text_the_schema_forces() -> None:
    tok, drafter, lookup = lookup_after('{"name": "ab"')
    tree = propose(drafter, lookup, 0, drafter.top_k, drafter.total_tokens)
    assert tok.decode(tree.tokens[1:].tolist()) == ', "n": '  # then a number: nothing forced
    _, _, free = lookup_after('{"name": "ab')
    assert not free.guess(), "inside a string the grammar forces nothing: the member sleeps"


def test_a_guess_after_a_tail_is_the_guess_once_the_tail_is_committed() -> None:
    """What makes its evaluation exact (core/speculation/model_free/base.py)."""
    text = '{"name": "ab", "n": 12, "ok": true, "tag": "red"}'
    tok = char_tokenizer()
    ids = tok.encode(text)
    for cut in range(1, len(ids)):
        for tail_len in (1, 3, 7):
            tail = ids[cut : cut + tail_len]
            _, _, before = lookup_after(text[:cut])
            _, _, after = lookup_after(tok.decode(ids[: cut + len(tail)]))
            assert before.guess(tail) == after.guess(), (cut, tail)


def test_no_grammar_or_a_prompt_position_has_no_guess() -> None:
    assert not GrammarDrafter().start([1, 2, 3]).guess()
    tok = char_tokenizer()
    matcher = GrammarCompiler(tok, len(tok), [0]).matcher(JSON_SPEC)
    prompt = tok.encode("Give JSON")
    lookups = RequestLookups.start({0: GrammarDrafter()}, prompt, record_from=2,
                                   grammar=OutputGrammar(matcher, len(prompt)))
    lookups.sync(prompt + tok.encode('{"n'))
    guesses = lookups.take(len(prompt) + 2).guesses[0]  # positions 2 .. len(prompt) + 1
    assert not any(guesses[: len(prompt) - 3]), "the prompt's positions"
    assert [tok.decode(list(g.ids)) for g in guesses[-3:]] == ["{", '"', "n"], (
        "the output's first token, then the first key, are forced")


def grammar_engine(tok, seed: int = 3, policy: str = "normalhedge",  # type: ignore[no-untyped-def]
                   tree: TreeConfig = TREE) -> tuple[torch.nn.Module, SpecEngine]:
    target = tiny_target(vocab=len(tok), hidden=32, seed=seed)
    pool: dict[str, object] = {
        f"d{i}": random_drafter(target, draft_vocab=len(tok) - 4, seed=20 + i, scale=0.6)
        for i in range(2)}
    pool["grammar"] = make_model_free("grammar")
    engine = make_engine(target, pool, tree, policy)  # type: ignore[arg-type]
    engine.target = Target(target, tok, AUX)
    engine.tokenizer = tok
    return target, engine


@pytest.mark.parametrize("policy", ["fixed:grammar", "normalhedge"])
def test_constrained_greedy_equals_plain_constrained_greedy(policy: str) -> None:
    tok = char_tokenizer()
    target, engine = grammar_engine(tok)
    drafted = 0
    for prompt in (tok.encode("Give JSON"), tok.encode("x")):
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=80,
                                                                grammar=JSON_SPEC), policy)
        assert ids == plain_constrained_greedy(target, tok, prompt, 80, JSON_SPEC), policy
        json.loads(tok.decode(ids))
        drafted += sum(1 for d in stats.drafter_per_round if d == "grammar")
    assert drafted > 0, "the grammar member must draft for the test to mean anything"


def test_the_estimate_is_the_realised_length_under_greedy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tok = char_tokenizer()
    _, engine = grammar_engine(tok, policy="fixed:grammar")
    engine.config = replace(engine.config, evaluate_all=True)
    index = engine.snapshot.index("grammar")
    params = SamplingParams(max_new_tokens=80, grammar=JSON_SPEC)
    checked = long = 0
    for prompt in (tok.encode("Give JSON"), tok.encode("x")):
        for w in windows_of(engine, prompt, params, "fixed:grammar", monkeypatch):
            if w.is_round and not w.censored and w.chosen == index:
                assert w.est_len[index] == w.realised, w.start
                checked += 1
                long += w.realised >= 4
    assert checked >= 6 and long >= 2, (checked, long)


def test_the_estimate_is_unbiased_when_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling (the Monte Carlo check the other kinds have): over the rounds it drafted, the
    mean ÂL of its windows matches the mean realised length within 3 standard errors."""
    tok = char_tokenizer()
    _, engine = grammar_engine(tok, policy="fixed:grammar")
    engine.config = replace(engine.config, evaluate_all=True)
    index = engine.snapshot.index("grammar")
    est, real = [], []
    for seed in range(12):
        params = SamplingParams(max_new_tokens=60, temperature=0.8, seed=seed, grammar=JSON_SPEC)
        for w in windows_of(engine, tok.encode("Give JSON"), params, "fixed:grammar",
                            monkeypatch):
            if w.is_round and not w.censored and w.chosen == index:
                est.append(float(w.est_len[index]))
                real.append(w.realised)
    assert len(est) >= 40
    gap = abs(np.mean(est) - np.mean(real))
    noise = 3 * np.std(np.array(real) - np.array(est)) / np.sqrt(len(est))
    assert gap <= noise, (np.mean(est), np.mean(real), noise)


def test_on_structured_output_the_learner_drafts_with_it() -> None:
    """Among random EAGLE drafters the forced chain is the best draft wherever it is awake;
    NormalHedge finds it, and the request commits more per round than with them alone."""
    tok = char_tokenizer()
    _, engine = grammar_engine(tok)
    params = SamplingParams(max_new_tokens=80, grammar=JSON_SPEC)
    _, stats = engine.generate_ids(tok.encode("Give JSON"), params, "normalhedge")
    _, alone = engine.generate_ids(tok.encode("Give JSON"), params, "fixed:d0")
    rounds = [d for d in stats.drafter_per_round if d]
    assert rounds.count("grammar") >= len(rounds) // 3, Counter(rounds)
    assert stats.completion_tokens / stats.rounds > alone.completion_tokens / alone.rounds


FORCED_REGEX = GrammarSpec("regex", "[ab]c[a-d]+")
# [ab], then c forced, then [a-d] (tokens a..d are 1..4)
FORCED_MASKS = [torch.tensor([0, 1, 1, 0, 0]), torch.tensor([0, 0, 0, 1, 0]),
                torch.tensor([0, 1, 1, 1, 1])]


def test_constrained_sampling_with_the_grammar_member_follows_the_target_law() -> None:
    """The law of the first three sampled tokens over 1000 seeds, the grammar member drafting
    the forced c (fixed, and inside NormalHedge beside two EAGLE drafters), against the exact
    constrained law (the control that this bound sees a broken verifier is
    tests/core/speculation/test_grammar.py's)."""
    tok = char_tokenizer("abcd")
    target, engine = grammar_engine(tok, seed=4, tree=TreeConfig(top_k=3, depth=3,
                                                                 total_tokens=8))
    prompt, temp, n = [1, 2, 3], 0.9, 1000
    counts: Counter[tuple[int, ...]] = Counter()
    used = 0
    for seed in range(n):
        params = SamplingParams(max_new_tokens=3, temperature=temp, seed=seed,
                                grammar=FORCED_REGEX)
        ids, stats = engine.generate_ids(prompt, params,
                                         policy=("normalhedge", "fixed:grammar")[seed % 2])
        counts[tuple(ids)] += 1
        used += stats.drafter_per_round.count("grammar")
    assert used > n // 4
    exact = exact_constrained_law(target, prompt, temp, FORCED_MASKS)
    assert tv(counts, exact, n) < 1.2 * null_tv_quantile(exact, n)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        make_model_free("grammar", {"max_depth": 0})
    with pytest.raises(ValueError, match="unknown grammar parameter"):
        make_model_free("grammar", {"max_n": 3})
    assert make_model_free("grammar", {"max_depth": 4}).params == {"max_depth": 4}
