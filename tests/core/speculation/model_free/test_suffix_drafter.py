"""The `suffix` model-free drafter: longest match, frequency scores, the cross-request cache
and its bound, and the property that makes its counterfactual evaluation exact (a guess over a
tail equals the guess after committing that tail)."""

from __future__ import annotations

import copy
import math
import random
import time

import pytest

from core.speculation.model_free.base import Guess
from core.speculation.model_free.kinds import make_model_free, model_free_kinds
from core.speculation.model_free.suffix import SUFFIX_DEFAULTS, SuffixDrafter


def suffix(**params: int) -> SuffixDrafter:
    drafter = make_model_free("suffix", params)
    assert isinstance(drafter, SuffixDrafter)
    return drafter


def test_registered_with_its_defaults() -> None:
    assert "suffix" in model_free_kinds()
    assert suffix().params == SUFFIX_DEFAULTS
    assert suffix(max_n=4).params == {**SUFFIX_DEFAULTS, "max_n": 4}


def test_longest_match_wins_over_more_frequent_shorter_ones() -> None:
    # "1" was followed by 5 three times and by 7 once; "3 1" (the longer context) only by 7
    tokens = [9, 1, 5, 8, 1, 5, 8, 1, 5, 3, 1, 7, 0, 3, 1]
    assert suffix().start(tokens).guess() == Guess((7,), (0.0,))
    # with contexts of one token only, frequency decides: 5 first
    assert suffix(max_n=1).start(tokens).guess().ids == (5, 7)


def test_frequency_ranks_candidates_with_log_shares() -> None:
    # "1 2" was followed by 4 three times, by 5 twice, by 3 once; no longer context recurs
    tokens = [10, 1, 2, 4, 11, 1, 2, 5, 12, 1, 2, 4, 13, 1, 2, 3, 14, 1, 2, 4, 15, 1, 2, 5,
              16, 1, 2]
    guess = suffix().start(tokens).guess()
    assert guess.ids == (4, 5, 3)
    assert guess.logp == pytest.approx((math.log(3 / 6), math.log(2 / 6), math.log(1 / 6)))
    top2 = suffix(top_k=2).start(tokens).guess()
    assert top2.ids == (4, 5)
    assert top2.logp == pytest.approx((math.log(3 / 6), math.log(2 / 6)))


def test_empty_guess_when_nothing_matches() -> None:
    assert not suffix().start([1, 2, 3, 4]).guess()
    assert not suffix().start([]).guess()
    assert suffix().start([1, 2, 3, 4]).guess() == Guess()


def test_occurrences_inside_the_tail_count() -> None:
    # the context "9" occurs only inside the tail, followed by 4
    lookup = suffix().start([1, 2, 3])
    assert not lookup.guess([9])
    assert lookup.guess([9, 4, 9]) == Guess((4,), (0.0,))


PROMPT_A = list(range(1000, 1020))
ANSWER = list(range(2000, 2030))
PROMPT_B = list(range(3000, 3020))


def test_a_request_repeating_a_cached_answer_gets_it_from_the_cache() -> None:
    drafter = suffix()
    before = drafter.start(PROMPT_B)
    before.extend(ANSWER[:3])
    assert not before.guess()  # nothing cached yet, and the request has no earlier match
    drafter.observe(PROMPT_A + ANSWER, len(PROMPT_A))
    after = drafter.start(PROMPT_B)
    after.extend(ANSWER[:3])
    assert after.guess() == Guess((ANSWER[3],), (0.0,))
    assert after.guess(ANSWER[3:10]).ids == (ANSWER[10],)


def test_the_cached_answer_keeps_its_context_from_the_prompt_end() -> None:
    # a request with A's prompt gets the answer's first token from the cache ...
    drafter = suffix()
    drafter.observe(PROMPT_A + ANSWER, len(PROMPT_A))
    assert drafter.start(PROMPT_A).guess().ids == (ANSWER[0],)
    # ... but the prompt itself is not cached: neither its middle nor its end predicts a token
    # of the prompt
    assert not drafter.start([7, *PROMPT_A[:10]]).guess()
    assert not drafter.start([7, PROMPT_A[-3]]).guess()


def test_own_occurrences_outweigh_cached_ones_of_the_same_length() -> None:
    # the context "5 6" is followed by 8 twice in the cache and by 9 once in the request
    cached = [5, 6, 8, 4, 5, 6, 8]
    own = [5, 6, 9, 7, 5, 6]
    for own_weight, best in ((8, 9), (1, 8)):
        drafter = suffix(own_weight=own_weight)
        drafter.observe([0, *cached], 1)
        guess = drafter.start(own).guess()
        assert guess.ids[0] == best
        assert sorted(guess.ids) == [8, 9]


def test_a_longer_cached_match_beats_a_shorter_own_one() -> None:
    drafter = suffix()
    drafter.observe([0, 4, 5, 6, 8], 1)
    assert drafter.start([6, 9, 4, 5, 6]).guess() == Guess((8,), (0.0,))


def random_responses(rng: random.Random, count: int, vocab: int = 6) -> list[list[int]]:
    return [[rng.randrange(vocab) for _ in range(rng.randrange(1, 30))] for _ in range(count)]


def test_eviction_keeps_the_newest_responses_and_removes_the_rest_exactly() -> None:
    rng = random.Random(0)
    responses = random_responses(rng, 20)  # a small vocabulary: shared contexts everywhere
    drafter = suffix(max_cached_responses=5)
    for r in responses:
        drafter.observe([99, *r], 1)
    assert drafter.cached_responses == 5
    fresh = suffix(max_cached_responses=5)
    for r in responses[-5:]:
        fresh.observe([99, *r], 1)
    assert len(drafter.cache) == len(fresh.cache)  # no node of an evicted response left
    for _ in range(200):
        probe = [rng.randrange(7) for _ in range(rng.randrange(1, 8))]
        assert drafter.start(probe).guess() == fresh.start(probe).guess()


def test_eviction_forgets_the_oldest_answer() -> None:
    drafter = suffix(max_cached_responses=1)
    drafter.observe(PROMPT_A + ANSWER, len(PROMPT_A))
    other = list(range(4000, 4030))
    drafter.observe(PROMPT_A + other, len(PROMPT_A))
    assert not drafter.start([7, *ANSWER[:5]]).guess()
    assert drafter.start([7, *other[:5]]).guess().ids == (other[5],)


def test_no_cache_when_the_bound_is_zero() -> None:
    drafter = suffix(max_cached_responses=0)
    drafter.observe(PROMPT_A + ANSWER, len(PROMPT_A))
    assert drafter.cached_responses == 0
    assert not drafter.start([7, *ANSWER[:5]]).guess()


def test_guess_does_not_mutate_the_index() -> None:
    rng = random.Random(1)
    drafter = suffix()
    for r in random_responses(rng, 10):
        drafter.observe([99, *r], 1)
    lookup = drafter.start([rng.randrange(6) for _ in range(100)])
    state = copy.deepcopy((lookup.tokens, lookup.own.__dict__, drafter.cache.__dict__))
    for _ in range(50):
        lookup.guess([rng.randrange(6) for _ in range(rng.randrange(9))])
    assert (lookup.tokens, lookup.own.__dict__, drafter.cache.__dict__) == state


@pytest.mark.parametrize("max_n", [1, 3, 6])
def test_guess_over_a_tail_equals_the_guess_after_extending_by_it(max_n: int) -> None:
    rng = random.Random(max_n)
    drafter = suffix(max_n=max_n, top_k=4)
    for r in random_responses(rng, 8):
        drafter.observe([99, *r], 1)
    awake = 0
    for _ in range(300):
        prefix = [rng.randrange(6) for _ in range(rng.randrange(0, 40))]
        tail = [rng.randrange(6) for _ in range(rng.randrange(0, 9))]
        before = drafter.start(prefix).guess(tail)
        extended = drafter.start(prefix)
        extended.extend(tail)
        assert before == extended.guess()  # same ids, same order, same log-scores
        awake += bool(before)
    assert awake > 200  # the property was checked on real guesses, not on empty ones


def test_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown suffix parameter"):
        make_model_free("suffix", {"max_m": 3})
    for bad in (1.5, "3", True, None):
        with pytest.raises(ValueError, match="must be an integer"):
            make_model_free("suffix", {"top_k": bad})
    out_of_range = [("max_n", 0), ("max_n", 33), ("top_k", 0), ("top_k", 17), ("own_weight", 0),
                    ("max_cached_responses", -1), ("max_cached_responses", 4097)]
    for name, value in out_of_range:
        with pytest.raises(ValueError, match=f"suffix {name} must be in"):
            make_model_free("suffix", {name: value})
    with pytest.raises(ValueError, match="max_depth"):
        make_model_free("suffix", {"max_depth": 0})


def test_guess_cost_on_a_2000_token_request() -> None:
    """Measured, not asserted: prints µs per guess (about 10 on a 2024 laptop-class CPU)."""
    rng = random.Random(2)
    drafter = suffix()
    for r in random_responses(rng, 128, vocab=50):
        drafter.observe([99, *r], 1)
    lookup = drafter.start([rng.randrange(50) for _ in range(2000)])
    tails = [[rng.randrange(50) for _ in range(rng.randrange(9))] for _ in range(500)]
    t0 = time.perf_counter()
    guesses = [lookup.guess(t) for t in tails]
    per_guess = (time.perf_counter() - t0) / len(tails)
    print(f"suffix guess over 2,000 tokens + 128 cached responses: {per_guess * 1e6:.1f} µs")
    assert sum(map(bool, guesses)) > 400
