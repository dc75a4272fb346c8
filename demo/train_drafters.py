"""Train EAGLE-3 drafters the way SpecForge does, scaled down to CPU.

The frozen target runs over each rollout once (`demo.features.TargetFeatures`, shared by
every drafter of a build, like SpecForge's offline mode); training then reads packed rows of
rollouts (`demo.packing`) and unrolls the drafter for `ttt_steps` steps of training-time test
(see `demo.ttt`), with soft cross-entropy to the target restricted to the draft vocabulary.
The demo build trains the generalist on general chat plus a small share of every domain and
each specialist on its own domain (from scratch or from the generalist, `demo.pipeline`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import Tensor, nn
from tqdm import tqdm
from transformers import LlamaForCausalLM

from core.model.eagle3 import Eagle3Config, Eagle3Drafter, build_vocab_mapping
from core.model.precision import auto_dtype
from demo.features import TargetFeatures, draft_logits
from demo.packing import PackedBatch, collate, pack_rows
from demo.rollouts import Rollout
from demo.ttt import packed_attention_mask, shift_left, step_accuracy, step_loss, step_targets


@dataclass(frozen=True)
class DrafterSpec:
    # 4096 x 768 is what fits: eight drafters of this shape are 98 MB in fp16 (the shipped pool's
    # budget is 100 MB; 8192 or 1536 wide would be 120-158 MB), one tree step costs 1.6 ms
    # against 2.1 ms at 8192, and 4096 tokens cover 84% of the target's generated tokens.
    draft_vocab_size: int = 4096
    intermediate_size: int = 768
    ttt_steps: int = 3
    step_decay: float = 0.8  # loss weight of step s is step_decay ** s (EAGLE / SpecForge)
    batch_rows: int = 8  # packed rows per optimiser step
    row_tokens: int = 512  # tokens per packed row
    grad_clip: float = 0.5
    # Autocast dtype of the drafter's matmuls in training ("auto": bf16 where the device computes
    # it natively). bf16 autocast makes a step 1.6x faster on two AVX512-BF16 cores (3.9 -> 2.4 s,
    # 8 x 512 tokens); weights, optimiser state, teacher and loss stay fp32.
    compute_dtype: str = "auto"


@dataclass(frozen=True)
class Schedule:
    epochs: float
    lr: float
    warmup_steps: int = 20
    final_lr_fraction: float = 0.1


@dataclass
class TrainLog:
    losses: list[float] = field(default_factory=list)
    acc: list[list[float]] = field(default_factory=list)  # per logged window: acc per TTT step


def response_token_counts(rollouts: Sequence[Rollout], vocab_size: int) -> Tensor:
    """Frequency of every target token over the generated (loss-masked) tokens."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for r in rollouts:
        counts += torch.bincount(torch.tensor(r.response_ids, dtype=torch.long),
                                 minlength=vocab_size)
    return counts


def new_drafter(
    target: LlamaForCausalLM,
    counts: Tensor,
    spec: DrafterSpec,
    aux_layers: tuple[int, int, int],
    seed: int,
) -> Eagle3Drafter:
    """A freshly initialised drafter sharing the target's (frozen) embedding table."""
    torch.manual_seed(seed)
    cfg = Eagle3Config.for_target(
        target.config,
        draft_vocab_size=spec.draft_vocab_size,
        aux_layers=aux_layers,
        intermediate_size=spec.intermediate_size,
    )
    drafter = Eagle3Drafter(cfg, embed_tokens=_embedding(target))
    d2t, t2d = build_vocab_mapping(counts, spec.draft_vocab_size)
    drafter.set_vocab_mapping(d2t, t2d)
    return drafter.to(target.device)


def clone_drafter(drafter: Eagle3Drafter, target: LlamaForCausalLM) -> Eagle3Drafter:
    """An independent copy of `drafter` (weights and vocabulary) sharing the target embedding."""
    twin = Eagle3Drafter(drafter.cfg, embed_tokens=_embedding(target))
    twin.load_state_dict(drafter.state_dict())
    return twin.to(target.device)


def _embedding(target: LlamaForCausalLM) -> nn.Embedding:
    return cast(nn.Embedding, target.get_input_embeddings())


def unroll(
    drafter: Eagle3Drafter, batch: PackedBatch, spec: DrafterSpec
) -> Iterator[tuple[int, Tensor]]:
    """The drafter's draft-vocabulary logits [B,T,Vd] at every TTT step s."""
    hidden, kv = batch.fused.float(), None
    device = batch.fused.device.type
    dtype = training_autocast_dtype(spec, device)
    for s in range(spec.ttt_steps):
        tokens = shift_left(batch.ids, s + 1)  # x_{j+s+1}
        mask = packed_attention_mask(batch.doc, s)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            hidden, kv = drafter(hidden, tokens, batch.positions + s, past_kv=kv, attn_mask=mask)
            logits = drafter.logits(hidden)
        yield s, logits


def training_autocast_dtype(spec: DrafterSpec, device: str) -> torch.dtype | None:
    """The autocast dtype of training on `device`, None for plain fp32."""
    name = auto_dtype(device) if spec.compute_dtype == "auto" else spec.compute_dtype
    return None if name == "float32" else cast(torch.dtype, getattr(torch, name))


def ttt_unroll(
    drafter: Eagle3Drafter, batch: PackedBatch, lm_head: Tensor, spec: DrafterSpec
) -> tuple[Tensor, list[tuple[int, int]]]:
    """The weighted TTT loss Σ_s decay^s · loss_s and (hits, count) per step."""
    t2d = cast(Tensor, drafter.t2d)
    z_draft = draft_logits(batch.hidden, lm_head, t2d)  # [B,T,Vd]
    draftable = t2d[batch.argmax]
    total = z_draft.new_zeros(())
    stats: list[tuple[int, int]] = []
    for s, logits in unroll(drafter, batch, spec):
        teacher, teacher_argmax, loss_mask = step_targets(
            z_draft, draftable, batch.response, s, batch.doc
        )
        total = total + spec.step_decay**s * step_loss(logits, teacher, loss_mask)
        stats.append(step_accuracy(logits.detach(), teacher_argmax, loss_mask))
    return total, stats


def epoch_batches(
    rollouts: Sequence[Rollout], spec: DrafterSpec, generator: torch.Generator
) -> list[list[list[Rollout]]]:
    """One epoch: the rollouts in a seeded order, packed into rows, rows into batches."""
    order = torch.randperm(len(rollouts), generator=generator).tolist()
    rows = pack_rows(rollouts, spec.row_tokens, order)
    rows = [rows[k] for k in torch.randperm(len(rows), generator=generator).tolist()]
    packed = [[rollouts[i] for i in row] for row in rows]
    return [packed[i : i + spec.batch_rows] for i in range(0, len(packed), spec.batch_rows)]


def batches_for(
    rollouts: Sequence[Rollout], spec: DrafterSpec, epochs: float, seed: int
) -> Iterator[list[list[Rollout]]]:
    """`epochs` passes over the data (a fractional last epoch stops part-way)."""
    generator = torch.Generator().manual_seed(seed)
    total = total_steps(rollouts, spec, epochs, seed)
    done = 0
    while done < total:
        for batch in epoch_batches(rollouts, spec, generator):
            if done == total:
                return
            done += 1
            yield batch


def total_steps(rollouts: Sequence[Rollout], spec: DrafterSpec, epochs: float, seed: int) -> int:
    per_epoch = len(epoch_batches(rollouts, spec, torch.Generator().manual_seed(seed)))
    return max(1, math.ceil(epochs * per_epoch))


def lr_at(step: int, total: int, schedule: Schedule) -> float:
    """Linear warm-up, then cosine decay to final_lr_fraction of the peak."""
    if step < schedule.warmup_steps:
        return schedule.lr * (step + 1) / schedule.warmup_steps
    progress = (step - schedule.warmup_steps) / max(1, total - schedule.warmup_steps)
    floor = schedule.final_lr_fraction
    return schedule.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_drafter(
    drafter: Eagle3Drafter,
    features: TargetFeatures,
    rollouts: Sequence[Rollout],
    spec: DrafterSpec,
    schedule: Schedule,
    *,
    seed: int,
    desc: str,
) -> TrainLog:
    """AdamW (betas 0.9/0.95, no weight decay, clip 0.5) on the TTT loss, in place."""
    assert drafter.cfg.aux_layers == features.aux_layers, "features of other aux layers"
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=schedule.lr, betas=(0.9, 0.95), weight_decay=0.0)
    total = total_steps(rollouts, spec, schedule.epochs, seed)
    lm_head = features.lm_head.detach()
    log, window = TrainLog(), []
    drafter.train()
    bar = tqdm(batches_for(rollouts, spec, schedule.epochs, seed), total=total, desc=desc,
               unit="step")
    for step, rows in enumerate(bar):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, schedule)
        loss, stats = ttt_unroll(drafter, collate(rows, features, spec.row_tokens), lm_head, spec)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
        opt.step()
        log.losses.append(loss.item())
        window.append(stats)
        if (step + 1) % 25 == 0 or step + 1 == total:
            acc = _window_accuracy(window)
            log.acc.append(acc)
            window = []
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=" ".join(f"{a:.2f}" for a in acc))
    drafter.eval()
    return log


def _window_accuracy(window: list[list[tuple[int, int]]]) -> list[float]:
    steps = len(window[0])
    return [
        sum(w[s][0] for w in window) / max(1, sum(w[s][1] for w in window)) for s in range(steps)
    ]
