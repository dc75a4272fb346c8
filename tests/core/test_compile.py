"""Target.compile_layers (torch.compile per decoder layer) changes speed, never tokens: greedy
output and per-round acceptances equal the eager run, and the aux-layer features the drafters
read are still captured (their hooks sit outside the compiled code)."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

from core.config import SamplingParams, TreeConfig
from tests.core.tiny_models import hf_greedy, make_engine, random_drafter, tiny_target


def test_compiled_layers_keep_tokens_acceptances_and_features() -> None:
    target = tiny_target("llama")
    drafters = {f"d{i}": random_drafter(target, seed=i) for i in range(2)}
    tree = TreeConfig(top_k=3, depth=4, total_tokens=10)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    prompts = [[5, 9, 2], [1, 2, 3, 4, 5, 6, 7], [33]]
    eager = make_engine(target, drafters, tree, policy="fixed:d0")
    reference = []
    for prompt in prompts:
        ids, stats = eager.generate_ids(prompt, params)
        reference.append((hf_greedy(target, prompt, 16), ids, stats.accepted_per_round))

    torch._dynamo.reset()
    counters.clear()
    compiled = make_engine(target, drafters, tree, policy="fixed:d0")
    compiled.target.compile_layers()
    try:
        for prompt, (hf_ids, eager_ids, accepted) in zip(prompts, reference, strict=True):
            ids, stats = compiled.generate_ids(prompt, params)
            assert ids == hf_ids == eager_ids
            # same acceptances: the drafters saw the same aux-layer features as in eager mode
            assert stats.accepted_per_round == accepted
        assert counters["stats"]["unique_graphs"] >= 1  # the layers really ran compiled
    finally:
        for layer in compiled.target.decoder_layers:
            del layer.forward
        torch._dynamo.reset()
