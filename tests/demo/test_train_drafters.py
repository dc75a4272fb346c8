"""Drafter training on a tiny random target: compact features are exact, packing changes
nothing but the padding, training learns, is deterministic, and specialists clone."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from demo.features import TargetFeatures, draft_logits
from demo.packing import collate, pack_rows
from demo.rollouts import Rollout
from demo.train_drafters import (
    DrafterSpec,
    Schedule,
    clone_drafter,
    new_drafter,
    response_token_counts,
    total_steps,
    train_drafter,
    training_autocast_dtype,
    unroll,
)

V = 64
AUX = (1, 2, 3)
SPEC = DrafterSpec(draft_vocab_size=32, intermediate_size=32, ttt_steps=3, batch_rows=2,
                   row_tokens=40, compute_dtype="float32")


def tiny_target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    with torch.no_grad():  # a peaked (low-entropy) target, so there is something to learn
        model.lm_head.weight.mul_(30.0)
    return model


def rollouts(n: int = 8) -> list[Rollout]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        prompt = torch.randint(1, V, (5 + i % 3,), generator=g).tolist()
        response = torch.randint(1, V, (10 + i % 4,), generator=g).tolist()
        out.append(Rollout("python", f"r{i}", 0.0, tuple(prompt), tuple(response), i))
    return out


def features_for(target: LlamaForCausalLM, data: list[Rollout]) -> TargetFeatures:
    features = TargetFeatures(target, AUX, batch_size=3)
    features.compute(data, progress=False)
    return features


def train(epochs: float, seed: int = 0) -> tuple[dict[str, torch.Tensor], list[float]]:
    target = tiny_target()
    data = rollouts()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, AUX, seed)
    log = train_drafter(drafter, features_for(target, data), data, SPEC,
                        Schedule(epochs=epochs, lr=3e-3, warmup_steps=2), seed=seed, desc="test")
    return drafter.state_dict(), log.losses


def test_compact_features_give_back_the_exact_target_logits() -> None:
    """hidden @ lm_head reproduces the logits, per rollout, whatever the batch composition."""
    target, data = tiny_target(), rollouts()
    features = features_for(target, data)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[::2] = True
    for r in data:
        with torch.no_grad():
            out = target(input_ids=torch.tensor([r.ids]), output_hidden_states=True)
        view = features.views[r]
        torch.testing.assert_close(view.fused,
                                   torch.cat([out.hidden_states[i][0] for i in AUX], -1))
        assert torch.equal(view.argmax.long(), out.logits[0].argmax(-1))
        torch.testing.assert_close(draft_logits(view.hidden, features.lm_head, t2d),
                                   out.logits[0][:, t2d], atol=1e-4, rtol=1e-4)


def test_packing_fills_rows_and_keeps_documents_apart() -> None:
    data = rollouts()
    rows = pack_rows(data, 40, range(len(data)))
    assert sorted(i for row in rows for i in row) == list(range(len(data)))
    assert all(sum(len(data[i].ids) for i in row) <= 40 for row in rows)
    assert len(rows) < len(data)  # several rollouts share a row
    batch = collate([[data[i] for i in rows[0]]], features_for(tiny_target(), data), 40)
    first = len(data[rows[0][0]].ids)
    assert batch.doc[0, :first].eq(0).all() and batch.doc[0, first].item() == 1
    assert batch.positions[0, first].item() == 0  # positions restart in every document


def test_a_packed_rollout_trains_exactly_as_it_would_alone() -> None:
    """Every TTT step's logits of rollout B packed after A equal B's logits alone."""
    target, data = tiny_target(), rollouts()
    features = features_for(target, data)
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, AUX, 0)
    a, b = data[0], data[1]
    packed = collate([[a, b]], features, 64)
    alone = collate([[b]], features, 64)
    with torch.no_grad():
        for (_, lp), (_, la) in zip(unroll(drafter, packed, SPEC), unroll(drafter, alone, SPEC),
                                    strict=True):
            n = len(b.ids) - SPEC.ttt_steps  # later positions read tokens past the document
            torch.testing.assert_close(lp[0, len(a.ids) : len(a.ids) + n], la[0, :n],
                                       atol=1e-5, rtol=1e-4)


def test_bf16_autocast_runs_the_drafter_in_bf16_close_to_fp32() -> None:
    """compute_dtype bf16 autocasts the drafter's matmuls (what makes CPU training 1.6x faster)
    and stays close to the fp32 unroll; float32 turns autocast off."""
    target, data = tiny_target(), rollouts()
    features = features_for(target, data)
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, AUX, 0)
    batch = collate([[data[0]]], features, 64)
    bf16 = replace(SPEC, compute_dtype="bfloat16")
    assert training_autocast_dtype(SPEC, "cpu") is None
    with torch.no_grad():
        for (_, l32), (_, l16) in zip(unroll(drafter, batch, SPEC), unroll(drafter, batch, bf16),
                                      strict=True):
            assert l32.dtype == torch.float32 and l16.dtype == torch.bfloat16
            torch.testing.assert_close(l16.float(), l32, atol=0.1, rtol=0.05)


def test_training_reduces_the_ttt_loss() -> None:
    _, losses = train(epochs=30)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_training_is_deterministic() -> None:
    a, _ = train(epochs=1)
    b, _ = train(epochs=1)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_epochs_set_the_number_of_steps() -> None:
    data = rollouts()
    one = total_steps(data, SPEC, 1.0, 0)
    assert total_steps(data, SPEC, 2.5, 0) == -(-5 * one // 2)
    _, losses = train(epochs=2.0)
    assert len(losses) == 2 * one


def test_clone_is_independent_and_shares_the_embedding() -> None:
    target = tiny_target()
    data = rollouts()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, AUX, 0)
    twin = clone_drafter(drafter, target)
    assert all(torch.equal(v, twin.state_dict()[k]) for k, v in drafter.state_dict().items())
    with torch.no_grad():
        twin.fc.weight.add_(1.0)
    assert not torch.equal(drafter.fc.weight, twin.fc.weight)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(twin.embed(ids), drafter.embed(ids))


def test_features_of_other_aux_layers_are_refused() -> None:
    target, data = tiny_target(), rollouts()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, (1, 2, 3), 0)
    features = TargetFeatures(target, (0, 1, 2))
    with pytest.raises(AssertionError, match="other aux layers"):
        train_drafter(drafter, features, data, SPEC, Schedule(epochs=1, lr=1e-3), seed=0, desc="t")
