"""Greedy speculative decoding equals Hugging Face greedy `generate`, token for token."""

from __future__ import annotations

import pytest
import torch

from bench.harness.tiny_models import (
    bigram_target,
    copy_drafter,
    hf_greedy,
    make_engine,
    random_drafter,
    tiny_target,
)
from core.config import SamplingParams, TreeConfig

TREES = {"chain": TreeConfig(top_k=1, depth=4, total_tokens=4),
         "tree": TreeConfig(top_k=3, depth=4, total_tokens=10)}


def prompts(count: int, vocab: int, seed: int = 7) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(torch.randint(1, 12, (), generator=gen)),),
                          generator=gen).tolist()
            for _ in range(count)]


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
@pytest.mark.parametrize("tree", sorted(TREES))
def test_random_drafters_match_hf_generate(family: str, tree: str) -> None:
    target = tiny_target(family)  # mistral: sliding_window 4096 as Mistral-7B-v0.1, never reached
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(3)}
    engine = make_engine(target, drafters, TREES[tree])
    for prompt in prompts(20, 64):
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=24, ignore_eos=True))
        assert ids == hf_greedy(target, prompt, 24), f"mismatch for prompt {prompt}"
        assert stats.target_forwards == stats.rounds + 1


@pytest.mark.parametrize("tree", sorted(TREES))
def test_mistral_sliding_window_shorter_than_the_context(tree: str) -> None:
    # A window of 6 bites after a few tokens: the tree mask must apply it like transformers does.
    target = tiny_target("mistral", sliding_window=6)
    engine = make_engine(target, {f"d{i}": random_drafter(target, seed=i) for i in range(2)},
                         TREES[tree])
    for prompt in prompts(8, 64, seed=11):
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=24, ignore_eos=True))
        assert ids == hf_greedy(target, prompt, 24), f"mismatch for prompt {prompt}"
        assert stats.target_forwards == stats.rounds + 1


@pytest.mark.parametrize("tree", sorted(TREES))
def test_copy_drafter_accepts_every_draft_token(tree: str) -> None:
    target, perm = bigram_target()
    cfg = TREES[tree]
    engine = make_engine(target, {"copy": copy_drafter(target, perm)}, cfg, policy="fixed:copy")
    for prompt in prompts(20, 32, seed=3):
        ids, stats = engine.generate_ids(prompt, SamplingParams(max_new_tokens=31, ignore_eos=True))
        assert ids == hf_greedy(target, prompt, 31)
        assert stats.accepted_per_round[:-1] == (cfg.depth,) * (stats.rounds - 1)
        assert stats.target_forwards == stats.rounds + 1


def test_eos_and_length() -> None:
    target, perm = bigram_target()
    engine = make_engine(target, {"copy": copy_drafter(target, perm)}, TREES["tree"],
                         policy="fixed:copy")
    ref = hf_greedy(target, [1, 2], 20)
    stop = ref[9]
    target.config.eos_token_id = stop  # read by Target.eos_token_ids at each request
    outs = list(engine.generate([1, 2], SamplingParams(max_new_tokens=20)))
    ids = [t for o in outs for t in o.token_ids]
    assert ids == ref[: ref.index(stop)] and outs[-1].finish_reason == "stop"
    outs = list(engine.generate([1, 2], SamplingParams(max_new_tokens=20, ignore_eos=True)))
    assert [t for o in outs for t in o.token_ids] == ref and outs[-1].finish_reason == "length"
    outs = list(engine.generate([1, 2], SamplingParams(max_new_tokens=7)))
    assert [t for o in outs for t in o.token_ids] == ref[:7] and outs[-1].finish_reason == "length"


def test_plain_mode_counts_one_forward_per_token() -> None:
    target = tiny_target()
    engine = make_engine(target, {"d0": random_drafter(target)}, TREES["tree"])
    ids, stats = engine.generate_ids([5, 6, 7], SamplingParams(max_new_tokens=10, ignore_eos=True),
                                     policy="none")
    assert ids == hf_greedy(target, [5, 6, 7], 10)
    assert engine.target.forward_count == 10
    # every round after the prefill is plain: none is counted as speculative (MAT undefined)
    assert (stats.rounds, stats.plain_rounds) == (0, 9)
    assert stats.plain_round_indices == tuple(range(9))
