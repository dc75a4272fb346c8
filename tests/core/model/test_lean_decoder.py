"""The lean decoder forward (core/model/lean_decoder.py) against the Hugging Face module it
replaces, for every supported family, on batched rows with draft-tree masks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import core.model.target as target_module
from bench.harness.tiny_models import AUX, tiny_target
from core.model.lean_decoder import LeanDecoder, Projection, attend, attend_rows, pack
from core.model.precision import cpu_has_native_bf16
from core.model.target import Target

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")


def _model(family: str) -> torch.nn.Module:
    # Mistral with a window shorter than the contexts below, so the sliding mask is exercised.
    model = tiny_target(family, sliding_window=6) if family == "mistral" else tiny_target(family)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # transformers initialises biases to zero: give them values
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def _tree() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens, depths and ancestor mask of root -> (a, b), a -> c: two branches."""
    parents = [-1, 0, 0, 1]
    mask = torch.eye(4, dtype=torch.bool)
    for i, p in enumerate(parents):
        while p >= 0:
            mask[i, p] = True
            p = parents[p]
    return torch.tensor([5, 9, 11, 3]), torch.tensor([0, 1, 1, 2]), mask


def _passes(target: Target) -> list[torch.Tensor]:
    """A prefill of two rows of different lengths, then a tree on one row and a single token on
    the other in one batched pass: every row's hidden states and features."""
    cache = target.new_slot_cache()
    slots = [cache.acquire(), cache.acquire()]
    prompts = [torch.tensor([1, 7, 2, 9, 4, 4, 8, 3, 6]), torch.tensor([2, 5, 3])]
    outs = target.forward_rows(cache, slots, prompts, [torch.arange(len(p)) for p in prompts],
                               [None, None])
    for s, p in zip(slots, prompts, strict=True):
        cache.extend(s, len(p))
    tokens, depths, mask = _tree()
    outs += target.forward_rows(cache, slots, [tokens, torch.tensor([12])],
                                [9 + depths, torch.tensor([3])], [mask, None])
    return [x for o in outs for x in (o.hidden, o.features, o.logits)]


@pytest.mark.parametrize("family", FAMILIES)
def test_lean_forward_matches_the_module_for_every_family(family: str) -> None:
    model = _model(family)
    lean, module = Target(model, None, AUX), Target(model, None, AUX, lean=False)
    assert lean.lean is not None and module.lean is None
    for a, b in zip(_passes(lean), _passes(module), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert lean.lean.calls == 2  # both passes ran the lean forward


@pytest.mark.parametrize("family", ("llama", "mistral"))
def test_rows_that_attend_apart_match_the_module(family: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # every pass attends row by row (attend_rows): a prefill of unequal rows, then a tree on top
    # of one prefix beside one token on top of another (rows' keys start past their prefixes)
    monkeypatch.setattr(target_module, "ROW_ATTENTION_TOKENS", 1)
    model = _model(family)
    lean, module = Target(model, None, AUX), Target(model, None, AUX, lean=False)
    for a, b in zip(_passes(lean), _passes(module), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_attend_rows_matches_attend_on_the_real_queries() -> None:
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 6, 5, 8, generator=gen)
    keys, values = torch.randn(3, 2, 9, 8, generator=gen), torch.randn(3, 2, 9, 8, generator=gen)
    spans = [(5, 9), (2, 4), (3, 7)]  # (new tokens, keys) per row; the rest is padding
    mask = torch.full((3, 1, 5, 9), float("-inf"))
    for b, (t, s) in enumerate(spans):
        mask[b, 0, :t, : s - t] = 0.0
        mask[b, 0, :t, s - t : s] = torch.zeros(t, t).masked_fill(
            torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        mask[b, 0, t:, 0] = 0.0  # a padding query sees one key
    got, want = attend_rows(q, keys, values, mask, 0.3, spans), attend(q, keys, values, mask, 0.3)
    for b, (t, _) in enumerate(spans):
        torch.testing.assert_close(got[b, :, :t], want[b, :, :t], rtol=1e-5, atol=1e-5)
        assert not got[b, :, t:].any()  # padding queries come out zero


def test_the_modules_linears_read_the_fused_storage() -> None:
    """Fusing holds nothing twice: q/k/v and gate/up become views of the fused weights."""
    model = _model("qwen2")
    decoder = LeanDecoder.of(model)
    assert decoder is not None
    attn = model.model.layers[0].self_attn
    fused = decoder.layers[0].qkv
    assert attn.q_proj.weight.data_ptr() == fused.weight.data_ptr()
    assert attn.v_proj.bias is not None and fused.bias is not None
    assert attn.v_proj.bias.data_ptr() > fused.bias.data_ptr()
    with torch.no_grad():
        attn.k_proj.weight[0, 0] = 123.0
    assert float(fused.weight[attn.q_proj.weight.shape[0], 0]) == 123.0


def test_another_activation_falls_back_to_the_module() -> None:
    model = tiny_target("llama")
    model.config.hidden_act = "gelu"
    assert LeanDecoder.of(model) is None
    target = Target(model, None, AUX)
    assert target.lean is None
    prompt = torch.tensor([1, 2, 3])
    cache = target.new_slot_cache()
    out = target.forward_rows(cache, [cache.acquire()], [prompt], [torch.arange(3)], [None])[0]
    assert out.features.shape == (3, 3 * model.config.hidden_size)


@pytest.mark.parametrize("rows", [1, 3])
def test_attention_matches_sdpa_with_grouped_heads_and_masks(rows: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(rows, 6, 4, 8, generator=gen)
    keys, values = torch.randn(rows, 2, 10, 8, generator=gen), torch.randn(rows, 2, 10, 8,
                                                                           generator=gen)
    allowed = torch.rand(rows, 1, 4, 10, generator=gen) > 0.4
    allowed[..., 0] = True
    mask = torch.zeros(rows, 1, 4, 10).masked_fill(~allowed, float("-inf"))
    want = F.scaled_dot_product_attention(q, keys.repeat_interleave(3, 1),
                                          values.repeat_interleave(3, 1), attn_mask=mask,
                                          scale=0.3)
    torch.testing.assert_close(attend(q, keys, values, mask, 0.3), want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="packing is used for bf16 on CPUs with "
                    "native bf16 only (AVX512-BF16 or AMX)")
def test_packed_projection_is_bit_identical_and_batch_invariant() -> None:
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(96, 64, generator=gen) * 0.1).to(torch.bfloat16)
    bias = torch.randn(96, generator=gen).to(torch.bfloat16)
    packed = pack(Projection(weight, bias))
    assert packed.packed is not None
    x = torch.randn(2, 17, 64, generator=gen).to(torch.bfloat16)
    assert torch.equal(packed(x), F.linear(x, weight, bias))
    # a row's result does not depend on how many rows share the call
    alone = packed(x[:1, :1])
    for rows in (2, 5, 17):
        assert torch.equal(packed(x[:1, :rows])[:, :1], alone)
