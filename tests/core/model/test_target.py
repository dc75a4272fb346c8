"""Target: aux hidden-state capture, tree forward == sequential paths, KV compaction."""

from __future__ import annotations

import pytest
import torch

from bench.harness.tiny_models import tiny_target
from core.model.target import Target, additive_mask, compact_cache, served_aux_layers
from core.speculation.tree import tree_from_parents


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_features_are_inputs_of_the_aux_layers(family: str) -> None:
    model = tiny_target(family, layers=6)
    target = Target(model, None, (1, 3, 4))
    seen: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_pre_hook(
        lambda mod, args, kwargs, i=i: seen.__setitem__(
            i, (args[0] if args else kwargs["hidden_states"])[0]),
        with_kwargs=True) for i, layer in enumerate(model.model.layers)]
    ids = torch.tensor([3, 9, 27, 4, 1])
    out = target.forward(target.new_cache(), ids, torch.arange(5))
    for h in hooks:
        h.remove()
    want = torch.cat([seen[1], seen[3], seen[4]], dim=-1)
    torch.testing.assert_close(out.features, want)
    wrong = torch.cat([seen[2], seen[3], seen[4]], dim=-1)
    assert not torch.allclose(out.features, wrong)


def test_served_aux_layers_are_eagle3_s_and_distinct() -> None:
    assert served_aux_layers(32) == (2, 16, 29)
    assert served_aux_layers(36) == (2, 18, 33)
    for layers in range(4, 40):
        low, mid, high = served_aux_layers(layers)
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


def test_compaction_keeps_a_sliding_window_model_consistent() -> None:
    # Mistral's sliding window used to leave the cache's length at the uncompacted count.
    model = tiny_target("mistral", sliding_window=4096)
    target = Target(model, None, (1, 2, 3))
    prompt = torch.tensor([1, 2, 3, 4, 5])
    tree = tree_from_parents(torch.tensor([6, 7, 8, 9, 10]), torch.tensor([-1, 0, 0, 2, 3]))
    cache = target.new_cache()
    target.forward(cache, prompt, torch.arange(5))
    target.forward(cache, tree.tokens, 5 + tree.depths, tree.mask)
    compact_cache(cache, 5, torch.tensor([0, 2, 3]))
    assert cache.get_seq_length() == 8
    nxt = target.forward(cache, torch.tensor([10, 11]), torch.arange(8, 10))
    full = model(torch.tensor([[1, 2, 3, 4, 5, 6, 8, 9, 10, 11]])).logits[0, -2:]
    torch.testing.assert_close(nxt.logits, full, atol=1e-4, rtol=1e-4)


def test_sliding_window_mask_follows_positions() -> None:
    # Query at position p sees keys at positions p - W + 1 .. p (and only its tree ancestors).
    tree = tree_from_parents(torch.tensor([0, 1, 2]), torch.tensor([-1, 0, 0]))
    mask = additive_mask(4, tree.mask, torch.float32, positions=4 + tree.depths,
                         sliding_window=3)[0, 0]
    seen = (mask == 0).int().tolist()
    assert seen == [[0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 1]]


def test_tree_forward_with_full_and_sliding_layers_matches_transformers() -> None:
    # Qwen2 with use_sliding_window slides only layers >= max_window_layers: one mask per kind.
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
                      use_sliding_window=True, sliding_window=4, max_window_layers=2)
    model = Qwen2ForCausalLM(cfg).eval().requires_grad_(False)
    target = Target(model, None, (1, 2, 3))
    assert (target.sliding_window, target._mixed_windows) == (4, True)
    prompt = torch.tensor([5, 8, 13, 21, 34, 55, 2, 7])
    tree = tree_from_parents(torch.tensor([30, 11, 12, 13]), torch.tensor([-1, 0, 0, 1]))
    cache = target.new_cache()
    target.forward(cache, prompt, torch.arange(8))
    out = target.forward(cache, tree.tokens, 8 + tree.depths, tree.mask)
    for leaf_path in ([0, 1, 3], [0, 2]):
        seq = torch.cat([prompt, tree.tokens[leaf_path]])
        ref = model(seq[None]).logits[0, 8:]
        torch.testing.assert_close(out.logits[leaf_path], ref, atol=1e-4, rtol=1e-4)
