"""Training-time test must train exactly what inference runs: step s of the unroll at position j
equals depth s of chain drafting from the prefix ending at j."""

from __future__ import annotations

import math

import torch
from torch import nn

from core.model.eagle3 import Eagle3Config, Eagle3Drafter
from demo.ttt import (
    packed_attention_mask,
    response_mask,
    shift_left,
    step_accuracy,
    step_loss,
    step_targets,
    ttt_attention_mask,
)

H, V, VD, T = 32, 50, 20, 9


def tiny_drafter(seed: int = 0) -> tuple[Eagle3Drafter, nn.Embedding]:
    torch.manual_seed(seed)
    cfg = Eagle3Config(
        hidden_size=H, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=V, draft_vocab_size=VD, target_hidden_size=H, aux_layers=(1, 2, 3),
    )
    embed = nn.Embedding(V, H)
    drafter = Eagle3Drafter(cfg, embed_tokens=embed)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[torch.arange(0, 2 * VD, 2)] = True
    drafter.set_vocab_mapping(torch.arange(VD), t2d)
    return drafter.eval(), embed


def test_shift_left_pads_on_the_right() -> None:
    x = torch.tensor([[1, 2, 3, 4]])
    assert shift_left(x, 1, fill=0).tolist() == [[2, 3, 4, 0]]
    assert shift_left(x, 3, fill=9).tolist() == [[4, 9, 9, 9]]


def test_ttt_mask_is_causal_then_diagonal() -> None:
    mask = ttt_attention_mask(3, 2)[0, 0]
    allowed = (mask == 0).int().tolist()
    assert allowed == [
        [1, 0, 0, 1, 0, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 1, 0, 0, 1],
    ]
    assert mask[0, 1] == -math.inf


def test_response_mask_marks_generated_tokens() -> None:
    m = response_mask(torch.tensor([5, 3]), torch.tensor([2, 1]), 6)
    assert m.int().tolist() == [[0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]]


def test_step_targets_align_teacher_with_the_predicted_token() -> None:
    # Target logits at position u put all mass on draft id u % VD: the teacher at (step s,
    # position j) must be that of u = j + s + 1, and masked where x_{j+s+2} is not generated.
    logits = torch.full((1, T, V), -1e4)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[:VD] = True
    for u in range(T):
        logits[0, u, u % VD] = 0.0
    z, draftable = logits[..., t2d], t2d[logits.argmax(-1)]
    resp = response_mask(torch.tensor([T]), torch.tensor([4]), T)
    for s in range(3):
        teacher, argmax, mask = step_targets(z, draftable, resp, s)
        for j in range(T - s - 1):
            assert int(argmax[0, j]) == (j + s + 1) % VD
        expected = [4 <= j + s + 2 < T for j in range(T)]
        assert mask[0].tolist() == expected
        assert torch.allclose(teacher.sum(-1), torch.ones(1, T))


def test_packed_mask_keeps_each_document_to_itself() -> None:
    doc = torch.tensor([[0, 0, 1, 1, -1]])
    allowed = (packed_attention_mask(doc, 1)[0, 0] == 0).int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0, 1, 0, 0],  # document 1 does not see document 0
        [0, 0, 1, 1, 0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1, 0, 0, 0, 0, 1],  # padding sees only itself: no empty row
    ]


def test_step_targets_never_predict_across_a_document_boundary() -> None:
    z = torch.zeros(1, 6, VD)
    draftable = torch.ones(1, 6, dtype=torch.bool)
    resp = torch.ones(1, 6, dtype=torch.bool)
    doc = torch.tensor([[0, 0, 0, 1, 1, 1]])
    _, _, mask = step_targets(z, draftable, resp, 0, doc)
    assert mask[0].tolist() == [True, False, False, True, False, False]


def test_step_loss_is_minimal_at_the_teacher() -> None:
    teacher = torch.softmax(torch.randn(2, 4, VD), -1)
    mask = torch.ones(2, 4, dtype=torch.bool)
    at_teacher = step_loss(teacher.log(), teacher, mask)
    elsewhere = step_loss(torch.randn(2, 4, VD), teacher, mask)
    assert at_teacher < elsewhere
    hits, count = step_accuracy(teacher.log(), teacher.argmax(-1), mask)
    assert (hits, count) == (8, 8)


@torch.no_grad()
def test_unroll_step_equals_chain_drafting_at_inference() -> None:
    drafter, _ = tiny_drafter()
    fused = torch.randn(1, T, 3 * H)
    ids = torch.randint(0, V, (1, T))
    pos = torch.arange(T)[None]
    steps = 3
    # Training-time test: all positions at once, diagonal cache.
    outs, hidden, kv = [], fused, None
    for s in range(steps):
        mask = None if s == 0 else ttt_attention_mask(T, s)
        hidden, kv = drafter(hidden, shift_left(ids, s + 1), pos + s, past_kv=kv, attn_mask=mask)
        outs.append(hidden)
    # Inference: catch up on the prefix ending at j, then draft depth by depth from h_last,
    # feeding the (ground-truth) next tokens at positions j+1, j+2, ...
    for j in range(T - steps):
        h, past = drafter(fused[:, : j + 1], ids[:, 1 : j + 2], pos[:, : j + 1])
        h_last = h[:, -1:]
        torch.testing.assert_close(h_last, outs[0][:, j : j + 1], atol=1e-5, rtol=1e-4)
        for s in range(1, steps):
            tok = ids[:, j + s + 1 : j + s + 2]
            h_last, past = drafter(h_last, tok, torch.tensor([[j + s]]), past_kv=past)
            torch.testing.assert_close(h_last, outs[s][:, j : j + 1], atol=1e-5, rtol=1e-4)
