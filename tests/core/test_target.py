"""Target: aux hidden-state capture, tree forward == sequential paths, KV compaction."""

from __future__ import annotations

import pytest
import torch

from core.drafter_check import default_aux_layers
from core.target import Target, compact_cache
from core.tree import tree_from_parents
from tests.core.tiny_models import tiny_target


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_features_are_inputs_of_the_aux_layers(family: str) -> None:
    model = tiny_target(family, layers=6)
    target = Target(model, None, (1, 3, 4))
    seen: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_pre_hook(
        lambda mod, args, kwargs, i=i: seen.__setitem__(i, (args[0] if args else kwargs["hidden_states"])[0]),
        with_kwargs=True) for i, layer in enumerate(model.model.layers)]
    ids = torch.tensor([3, 9, 27, 4, 1])
    out = target.forward(target.new_cache(), ids, torch.arange(5))
    for h in hooks:
        h.remove()
    want = torch.cat([seen[1], seen[3], seen[4]], dim=-1)
    torch.testing.assert_close(out.features, want)
    wrong = torch.cat([seen[2], seen[3], seen[4]], dim=-1)
    assert not torch.allclose(out.features, wrong)


def test_default_aux_layers_are_distinct() -> None:
    assert default_aux_layers(32) == (2, 16, 29)
    assert default_aux_layers(36) == (2, 18, 33)
    for layers in range(4, 40):
        low, mid, high = default_aux_layers(layers)
        assert 0 <= low < mid < high < layers


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tree_forward_matches_sequential_paths(family: str) -> None:
    model = tiny_target(family)
    target = Target(model, None, (1, 2, 3))
    prompt = torch.tensor([5, 8, 13, 21])
    # root(0) -> 1, 2 ; 1 -> 3 ; 3 -> 4 ; 2 -> 5
    parents = torch.tensor([-1, 0, 0, 1, 3, 2])
    tokens = torch.tensor([30, 11, 12, 13, 14, 15])
    tree = tree_from_parents(tokens, parents)
    cache = target.new_cache()
    target.forward(cache, prompt, torch.arange(4))
    out = target.forward(cache, tree.tokens, 4 + tree.depths, tree.mask)
    for leaf_path in ([0, 1, 3, 4], [0, 2, 5]):
        seq = torch.cat([prompt, tokens[leaf_path]])
        ref = model(seq[None]).logits[0, 4:]
        torch.testing.assert_close(out.logits[leaf_path], ref, atol=1e-4, rtol=1e-4)


def test_generation_after_compaction_equals_recomputation() -> None:
    model = tiny_target()
    target = Target(model, None, (1, 2, 3))
    prompt = torch.tensor([1, 2, 3, 4, 5])
    tree = tree_from_parents(torch.tensor([6, 7, 8, 9, 10]), torch.tensor([-1, 0, 0, 2, 3]))
    cache = target.new_cache()
    target.forward(cache, prompt, torch.arange(5))
    target.forward(cache, tree.tokens, 5 + tree.depths, tree.mask)
    compact_cache(cache, 5, torch.tensor([0, 2, 3]))  # accept root -> 8 -> 9
    assert cache.get_seq_length() == 8
    nxt = target.forward(cache, torch.tensor([10, 11]), torch.arange(8, 10))
    full = model(torch.tensor([[1, 2, 3, 4, 5, 6, 8, 9, 10, 11]])).logits[0, -2:]
    torch.testing.assert_close(nxt.logits, full, atol=1e-4, rtol=1e-4)
