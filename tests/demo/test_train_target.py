"""Target training: packing, schedule, learning and determinism at tiny sizes."""

from __future__ import annotations

import torch

from demo.records import chat_text
from demo.tokenizer import train_tokenizer
from demo.train_target import TargetSpec, lr_at, mean_loss, pack_windows, train_target

TEXTS = [chat_text(f"add {i} and {i}", f"{i} + {i} = {2 * i}") for i in range(300)]
SPEC = TargetSpec(
    hidden_size=32, num_layers=4, num_heads=2, num_kv_heads=2, intermediate_size=64,
    max_positions=64, seq_len=32, batch_size=8, steps=30, lr=3e-3, warmup_steps=5,
)


def docs() -> tuple[list[list[int]], object]:
    tok = train_tokenizer(TEXTS, 300)
    return [tok(t)["input_ids"] for t in TEXTS], tok


def test_pack_windows_keeps_every_token_in_order_of_shuffled_docs() -> None:
    windows = pack_windows([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 3, torch.Generator().manual_seed(0))
    assert windows.shape == (3, 3)
    assert sorted(windows.flatten().tolist()) == list(range(1, 10))


def test_schedule_warms_up_then_decays_to_a_tenth() -> None:
    assert lr_at(0, SPEC) < lr_at(SPEC.warmup_steps - 1, SPEC) == SPEC.lr
    assert abs(lr_at(SPEC.steps, SPEC) - 0.1 * SPEC.lr) < 1e-12


def test_training_learns_and_is_deterministic() -> None:
    d, tok = docs()
    model_a, losses = train_target(d, tok, SPEC, seed=0)  # type: ignore[arg-type]
    model_b, _ = train_target(d, tok, SPEC, seed=0)  # type: ignore[arg-type]
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])
    a, b = model_a.state_dict(), model_b.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert mean_loss(model_a, d[:10], 32) < losses[0]
