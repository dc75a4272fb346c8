"""Drafter training on a tiny random target: it learns, it is deterministic, specialists clone."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from demo.rollouts import Rollout
from demo.train_drafters import (
    DrafterSpec,
    Schedule,
    TargetFeatures,
    clone_drafter,
    collate,
    new_drafter,
    response_token_counts,
    target_view,
    train_drafter,
)

V = 64
SPEC = DrafterSpec(draft_vocab_size=32, intermediate_size=32, ttt_steps=3, batch_size=4)


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
        out.append(Rollout("python", tuple(prompt), tuple(response), i))
    return out


def train(steps: int, seed: int = 0) -> tuple[dict[str, torch.Tensor], list[float]]:
    target = tiny_target()
    data = rollouts()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, (1, 2, 3), seed)
    log = train_drafter(
        drafter, target, data, SPEC, Schedule(steps=steps, lr=3e-3, warmup_steps=2),
        pad_id=0, seed=seed, desc="test",
    )
    return drafter.state_dict(), log.losses


def test_collate_right_pads() -> None:
    ids, lengths, prompt_lengths = collate(rollouts(2), pad_id=0)
    assert ids.shape == (2, max(int(lengths[0]), int(lengths[1])))
    assert lengths.tolist() == [15, 17] and prompt_lengths.tolist() == [5, 6]
    assert ids[0, 15:].eq(0).all()


def test_training_reduces_the_ttt_loss() -> None:
    _, losses = train(steps=40)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_training_is_deterministic() -> None:
    a, _ = train(steps=3)
    b, _ = train(steps=3)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_clone_is_independent_and_shares_the_embedding() -> None:
    target = tiny_target()
    data = rollouts()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, (1, 2, 3), 0)
    twin = clone_drafter(drafter, target)
    assert all(torch.equal(v, twin.state_dict()[k]) for k, v in drafter.state_dict().items())
    with torch.no_grad():
        twin.fc.weight.add_(1.0)
    assert not torch.equal(drafter.fc.weight, twin.fc.weight)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(twin.embed(ids), drafter.embed(ids))


def test_cached_features_match_a_fresh_target_pass() -> None:
    """Rows computed in one batch composition serve another: right padding keeps them exact."""
    target = tiny_target()
    data = rollouts()
    features = TargetFeatures(target, (1, 2, 3), pad_id=0)
    features.batch(data[:3])  # fills rows 0-2 in a batch of three
    batch = [data[2], data[5], data[0]]
    ids, lengths, prompt_lengths, fused, logits = features.batch(batch)
    ref_ids, ref_lengths, _ = collate(batch, pad_id=0)
    ref_fused, ref_logits = target_view(target, ref_ids, (1, 2, 3))
    assert torch.equal(ids, ref_ids) and torch.equal(lengths, ref_lengths)
    assert prompt_lengths.tolist() == [len(r.prompt_ids) for r in batch]
    for i, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(fused[i, :n], ref_fused[i, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(logits[i, :n], ref_logits[i, :n], atol=1e-4, rtol=1e-5)
        assert fused[i, n:].eq(0).all()


def test_shared_features_give_the_same_drafter() -> None:
    """Reusing the build's feature cache changes nothing but the time a step takes."""
    target = tiny_target()
    data = rollouts()
    shared = TargetFeatures(target, (1, 2, 3), pad_id=0)
    shared.batch(data)  # precomputed in one batch of eight
    states = []
    for features in (None, shared):
        drafter = new_drafter(target, response_token_counts(data, V), SPEC, (1, 2, 3), 0)
        train_drafter(
            drafter, target, data, SPEC, Schedule(steps=4, lr=3e-3, warmup_steps=1),
            pad_id=0, seed=0, desc="test", features=features,
        )
        states.append(drafter.state_dict())
    for k, v in states[0].items():
        torch.testing.assert_close(v, states[1][k], atol=1e-5, rtol=1e-4)


def test_features_of_another_target_are_refused() -> None:
    data = rollouts()
    features = TargetFeatures(tiny_target(), (1, 2, 3), pad_id=0)
    target = tiny_target()
    drafter = new_drafter(target, response_token_counts(data, V), SPEC, (1, 2, 3), 0)
    with pytest.raises(AssertionError, match="another target"):
        train_drafter(
            drafter, target, data, SPEC, Schedule(steps=1, lr=1e-3, warmup_steps=1),
            pad_id=0, seed=0, desc="test", features=features,
        )
