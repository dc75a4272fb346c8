"""Prompt lookup (core/speculation/model_free/ngram.py) and the trees model-free drafters
propose."""

from __future__ import annotations

import pytest

from core.speculation.model_free.kinds import make_model_free
from core.speculation.model_free.lookups import RequestLookups
from core.speculation.model_free.ngram import NgramDrafter
from core.speculation.model_free.trees import propose


def test_the_longest_recent_match_names_the_next_token() -> None:
    lookup = NgramDrafter(min_n=1, max_n=3).start([5, 1, 2, 9, 7, 1, 2, 3, 4, 1, 2])
    # last 3 tokens (4, 1, 2) never occurred before; (1, 2) did, most recently followed by 3
    assert lookup.guess().ids == (3,)
    assert lookup.guess([3]).ids == (4,)  # ... 1 2 3 | 3 -> (2, 3) was followed by 4
    assert NgramDrafter(min_n=1, max_n=3).start([5, 1, 2, 9]).guess().ids == ()


def test_min_n_refuses_short_matches() -> None:
    tokens = [1, 2, 3, 9, 3]
    assert NgramDrafter(min_n=1, max_n=3).start(tokens).guess().ids == (9,)
    assert NgramDrafter(min_n=2, max_n=3).start(tokens).guess().ids == ()


@pytest.mark.parametrize("tokens", [[1, 2, 1, 2, 1], [4, 4, 4], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]])
def test_a_guess_after_a_tail_is_the_guess_once_the_tail_is_committed(tokens: list[int]) -> None:
    """What makes the evaluation of a chain exact (core/speculation/model_free/base.py)."""
    drafter = NgramDrafter()
    for cut in range(1, len(tokens)):
        for tail_len in range(len(tokens) - cut + 1):
            tail = tokens[cut : cut + tail_len]
            before = drafter.start(tokens[:cut]).guess(tail)
            after = drafter.start(tokens[:cut] + tail).guess()
            assert before == after, (cut, tail)


def test_guess_does_not_change_the_index() -> None:
    lookup = NgramDrafter().start([1, 2, 3, 1, 2])
    first = lookup.guess()
    lookup.guess([3, 1, 2, 7, 7, 7])
    assert lookup.guess() == first and lookup.tokens == [1, 2, 3, 1, 2]


def test_the_chain_follows_the_earlier_text_up_to_max_depth() -> None:
    drafter = NgramDrafter(max_depth=4)
    lookup = drafter.start([10, 11, 12, 13, 14, 15, 10, 11])
    tree = propose(drafter, lookup, 11, drafter.top_k, drafter.total_tokens)
    assert tree.tokens.tolist() == [11, 12, 13, 14, 15]
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]


def test_a_grammar_cuts_the_chain_at_the_first_forbidden_token() -> None:
    import torch

    drafter = NgramDrafter(max_depth=4)
    lookup = drafter.start([10, 11, 12, 13, 14, 10, 11])

    def allowed(paths: list[list[int]]) -> torch.Tensor:
        mask = torch.ones(len(paths), 32, dtype=torch.bool)
        mask[:, 13] = False
        return mask

    tree = propose(drafter, lookup, 11, 1, 4, allowed)
    assert tree.tokens.tolist() == [11, 12]


def test_the_lookups_record_each_positions_guess_before_the_next_token() -> None:
    drafter = NgramDrafter()
    lookups = RequestLookups.start({2: drafter}, [1, 2, 3, 1, 2], record_from=3)
    lookups.sync([1, 2, 3, 1, 2, 3, 1])
    taken = lookups.take(6)
    # positions 3..5: after [1,2,3,1] -> 2; after [..,1,2] -> 3; after [..,2,3] -> 1
    assert taken.first == 3 and [g.ids for g in taken.guesses[2]] == [(2,), (3,), (1,)]
    assert taken.trees == {}  # a chain needs no tree: its evaluation is exact already


@pytest.mark.parametrize("params", [{"max_n": 0}, {"min_n": 4, "max_n": 3}, {"max_depth": 17},
                                    {"max_n": "3"}, {"max_n": 2.5}, {"max_n": True},
                                    {"window": 3}])
def test_bad_parameters_are_refused_with_a_message(params: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        make_model_free("ngram", params)
    with pytest.raises(ValueError, match="unknown drafter kind"):
        make_model_free("eagle9", {})


def test_params_round_trip() -> None:
    d = make_model_free("ngram", {"max_n": 4})
    assert d.params == {"min_n": 1, "max_n": 4, "max_depth": 8}
    assert make_model_free("ngram", d.params).params == d.params
