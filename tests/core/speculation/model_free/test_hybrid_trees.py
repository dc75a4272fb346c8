"""Hybrid trees (EngineConfig.hybrid): a model-free member's tree grafted at the root of every
EAGLE-3 tree the learner chooses. The union tree (core/speculation/tree.merge_trees) keeps greedy
output the target's and sampling on the target law, and commits what either tree alone would."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from bench.harness.tiny_models import AUX, hf_greedy, random_drafter, tiny_target
from core.config import EngineConfig, SamplingParams, SelectorConfig, TreeConfig
from core.engine import SpecEngine
from core.model.target import Target
from core.speculation.model_free.kinds import make_model_free
from core.speculation.tree import chain_tree, merge_trees, tree_from_parents
from tests.core.speculation.test_sampling_lossless import exact_sequences, null_tv_quantile, tv
from tests.core.test_model_free_engine import PROMPT, PROMPTS, pool

TREE = TreeConfig(top_k=3, depth=4, total_tokens=10)


def paths(tree) -> set[tuple[int, ...]]:  # type: ignore[no-untyped-def]
    toks, par = tree.tokens.tolist(), tree.parents.tolist()
    out: dict[int, tuple[int, ...]] = {0: ()}
    for i in range(1, len(toks)):
        out[i] = (*out[par[i]], toks[i])
    return set(out.values())


def test_the_union_holds_each_path_of_either_tree_once() -> None:
    # root 7 -> {1 -> {2, 3}, 4}
    first = tree_from_parents(torch.tensor([7, 1, 4, 2, 3]), torch.tensor([-1, 0, 0, 1, 1]))
    second = chain_tree([7, 1, 2, 5, 6])  # shares 7-1-2, then goes on
    merged = merge_trees(first, second)
    assert paths(merged) == paths(first) | paths(second)
    assert merged.num_drafted == 6  # 4 of first's + 5 and 6
    assert merged.children[0] == (1, 2) and merged.children[1] == (3, 4), (
        "the first tree's children keep their order; nothing is duplicated")
    other = chain_tree([7, 4, 2])  # token 2 under 4, where first has 2 only under 1
    assert paths(merge_trees(first, other)) == paths(first) | paths(other)
    assert merge_trees(first, chain_tree([7])) is first
    with pytest.raises(ValueError, match="root"):
        merge_trees(first, chain_tree([8, 1]))


def hybrid_engine(target: torch.nn.Module, members: dict[str, object], policy: str,
                  graft: str | None = "ngram", batching: bool = True,
                  tree: TreeConfig = TREE) -> SpecEngine:
    config = EngineConfig(tree=tree, selector=SelectorConfig(policy=policy), max_context=480,
                          hybrid=graft, batching=batching)
    return SpecEngine(Target(target, None, AUX), members, config)  # type: ignore[arg-type]


def test_greedy_output_is_the_targets() -> None:
    target = tiny_target()
    grafted = 0
    for policy in ("normalhedge", "fixed:d0"):
        engine = hybrid_engine(target, pool(target), policy)
        for prompt in PROMPTS:
            out = list(engine.generate(prompt, SamplingParams(max_new_tokens=30,
                                                              ignore_eos=True)))
            assert [t for o in out for t in o.token_ids] == hf_greedy(target, prompt, 30)
            grafted += sum(1 for o in out if o.round is not None and o.round.drafter == "d0"
                           and o.round.drafted > TREE.total_tokens)
    assert grafted > 0, "some EAGLE trees must carry a graft for the test to mean anything"


def test_a_graft_commits_what_the_lookup_would_on_a_repeating_text() -> None:
    """A random EAGLE drafter rarely guesses; the prompt's loop is what lookup drafts, so the
    hybrid of the two commits more per round than the EAGLE drafter alone."""
    target = tiny_target()
    prompt = PROMPTS[0]
    params = SamplingParams(max_new_tokens=30, ignore_eos=True)
    _, alone = hybrid_engine(target, pool(target), "fixed:d0", graft=None).generate_ids(prompt,
                                                                                        params)
    _, hybrid = hybrid_engine(target, pool(target), "fixed:d0").generate_ids(prompt, params)
    assert sum(hybrid.accepted_per_round) > sum(alone.accepted_per_round)


def test_sampling_with_hybrid_trees_follows_the_target_law() -> None:
    """Joint law of the first three tokens over 1000 seeds, every EAGLE tree carrying the
    lookup's chain, against the exact target law (the bound's control is
    tests/core/test_model_free_engine.py's, the same statistic)."""
    target = tiny_target(vocab=12, hidden=32, seed=4)
    members = {"d0": random_drafter(target, draft_vocab=8, seed=10, scale=0.6),
               "ngram": make_model_free("ngram")}
    engine = hybrid_engine(target, members, "fixed:d0",
                           tree=TreeConfig(top_k=3, depth=3, total_tokens=8))
    counts: Counter[tuple[int, ...]] = Counter()
    grafted, n = 0, 1000
    for seed in range(n):
        params = SamplingParams(max_new_tokens=3, temperature=0.9, top_p=0.95, seed=seed,
                                ignore_eos=True)
        out = list(engine.generate(PROMPT, params))
        counts[tuple(t for o in out for t in o.token_ids)] += 1
        grafted += sum(1 for o in out if o.round is not None and o.round.drafted > 8)
    assert grafted > n // 8
    exact = exact_sequences(target, PROMPT, 0.9, 0.95)
    assert tv(counts, exact, n) < 1.2 * null_tv_quantile(exact, n)
