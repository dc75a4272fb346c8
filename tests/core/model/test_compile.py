"""Target.compile_model (torch.compile of the decoder stack) changes speed, never tokens: greedy
output and per-round acceptances equal the eager run, so the aux-layer features the drafters
read are still captured by the hooks traced into the compiled graph."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from bench.harness.tiny_models import hf_greedy, make_engine, random_drafter, tiny_target
from core.config import SamplingParams, TreeConfig
from core.model.target import Target, TargetLoadError


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
    compiled.target.compile_model()
    try:
        for prompt, (hf_ids, eager_ids, accepted) in zip(prompts, reference, strict=True):
            ids, stats = compiled.generate_ids(prompt, params)
            assert ids == hf_ids == eager_ids
            # same acceptances: the drafters saw the same aux-layer features as in eager mode
            assert stats.accepted_per_round == accepted
        assert counters["stats"]["unique_graphs"] >= 1  # the layers really ran compiled
        assert compiled.target._captured == {}  # no activations held between passes
    finally:
        del target.model.forward  # back to the eager method for anything sharing this model
        torch._dynamo.reset()


def test_compile_with_device_map_is_refused(tmp_path: Path) -> None:
    target = tiny_target("llama")
    target.save_pretrained(tmp_path)
    with pytest.raises(TargetLoadError, match="device_map"):
        Target.load(tmp_path, compile_model=True, device_map="auto")


def test_engine_config_compile_reaches_the_loaded_target(tmp_path: Path) -> None:
    from bench.harness.tiny_pool import build_pool
    from core.config import EngineConfig
    from core.engine import SpecEngine

    pool = build_pool(tmp_path)
    eager = SpecEngine.from_pool_file(pool, EngineConfig())
    engine = SpecEngine.from_pool_file(pool, EngineConfig(compile=True))
    assert "forward" not in vars(eager.target.decoder)
    assert hasattr(vars(engine.target.decoder)["forward"], "_torchdynamo_orig_callable")
