"""Train EAGLE-3 drafters the way SpecForge does, scaled down to CPU.

The frozen target runs (no grad) over each rollout sequence once for its three fused aux
features and its logits (`TargetFeatures`, shared by every drafter of a build, like SpecForge's
offline mode); every batch then unrolls the drafter for `ttt_steps` steps of training-time test
(see `demo.ttt`). The generalist learns from every domain's rollouts;
each specialist starts from the generalist and is fine-tuned on its own domain only.
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

from core.eagle3 import Eagle3Config, Eagle3Drafter, build_vocab_mapping
from demo.precision import train_autocast
from demo.rollouts import Rollout
from demo.ttt import (
    response_mask,
    shift_left,
    step_accuracy,
    step_loss,
    step_targets,
    teacher_view,
    ttt_attention_mask,
)


@dataclass(frozen=True)
class DrafterSpec:
    draft_vocab_size: int = 1024
    intermediate_size: int = 512
    ttt_steps: int = 4
    step_decay: float = 0.8  # loss weight of step s is step_decay ** s (EAGLE / SpecForge)
    batch_size: int = 16
    grad_clip: float = 0.5


@dataclass(frozen=True)
class Schedule:
    steps: int
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
        counts += torch.bincount(torch.tensor(r.response_ids, dtype=torch.long), minlength=vocab_size)
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


@torch.no_grad()
def target_view(
    target: LlamaForCausalLM, ids: Tensor, aux_layers: tuple[int, int, int]
) -> tuple[Tensor, Tensor]:
    """Fused aux features [B,T,3H] (inputs of decoder layers aux_layers, low/mid/high) and the
    target logits [B,T,V]. Sequences are right-padded, so causal attention alone keeps every
    real position exact."""
    with train_autocast(ids.device):
        out = target(input_ids=ids, output_hidden_states=True)
    fused = torch.cat([out.hidden_states[i] for i in aux_layers], dim=-1).float()
    return fused, out.logits.float()


class TargetFeatures:
    """Each rollout's fused aux features [T,3H] and target logits [T,V], computed on first use.

    The target is frozen, so a rollout's features never change: the generalist's epochs and
    every specialist reuse them instead of re-running the target on every batch (that was a
    quarter of a training step on CPU). Memory: (3H + V) floats per token, ~1 GB per 100k tokens at
    the demo's sizes. Right padding plus causal attention make a row's features independent
    of the batch it was computed in.
    """

    def __init__(self, target: LlamaForCausalLM, aux_layers: tuple[int, int, int], pad_id: int) -> None:
        self.target, self.aux_layers, self.pad_id = target, aux_layers, pad_id
        self._rows: dict[Rollout, tuple[Tensor, Tensor]] = {}

    def batch(self, rollouts: Sequence[Rollout]) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """ids, lengths, prompt lengths, fused features and logits of a right-padded batch."""
        self._compute([r for r in dict.fromkeys(rollouts) if r not in self._rows])
        ids, lengths, prompt_lengths = collate(rollouts, self.pad_id)
        f0, z0 = self._rows[rollouts[0]]
        fused = f0.new_zeros(len(rollouts), ids.shape[1], f0.shape[-1])
        logits = z0.new_zeros(len(rollouts), ids.shape[1], z0.shape[-1])
        for i, r in enumerate(rollouts):
            f, z = self._rows[r]
            fused[i, : len(f)], logits[i, : len(z)] = f, z
        device = self.target.device
        return ids.to(device), lengths.to(device), prompt_lengths.to(device), fused, logits

    def _compute(self, missing: list[Rollout]) -> None:
        if not missing:
            return
        ids, lengths, _ = collate(missing, self.pad_id)
        fused, logits = target_view(self.target, ids.to(self.target.device), self.aux_layers)
        for i, r in enumerate(missing):
            n = int(lengths[i])
            self._rows[r] = (fused[i, :n].clone(), logits[i, :n].clone())


def collate(rollouts: Sequence[Rollout], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded ids [B,T], lengths [B] and prompt lengths [B]."""
    seqs = [r.ids for r in rollouts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    lengths = torch.tensor([len(s) for s in seqs])
    prompt_lengths = torch.tensor([len(r.prompt_ids) for r in rollouts])
    return ids, lengths, prompt_lengths


def ttt_unroll(
    drafter: Eagle3Drafter,
    fused: Tensor,
    ids: Tensor,
    target_logits: Tensor,
    resp_mask: Tensor,
    spec: DrafterSpec,
    pad_id: int,
) -> tuple[Tensor, list[tuple[int, int]]]:
    """The weighted TTT loss Σ_s decay^s · loss_s and (hits, count) per step."""
    b, t = ids.shape
    positions = torch.arange(t, device=ids.device)[None, :].expand(b, t)
    z_draft, draftable = teacher_view(target_logits, cast(Tensor, drafter.t2d))
    hidden, kv = fused, None
    total = fused.new_zeros(())
    stats: list[tuple[int, int]] = []
    for s in range(spec.ttt_steps):
        tokens = shift_left(ids, s + 1, fill=pad_id)  # x_{j+s+1}
        mask = None if s == 0 else ttt_attention_mask(t, s, ids.device)
        with train_autocast(ids.device):
            hidden, kv = drafter(hidden, tokens, positions + s, past_kv=kv, attn_mask=mask)
            logits = drafter.logits(hidden)
        teacher, teacher_argmax, loss_mask = step_targets(z_draft, draftable, resp_mask, s)
        total = total + spec.step_decay**s * step_loss(logits, teacher, loss_mask)
        stats.append(step_accuracy(logits.detach(), teacher_argmax, loss_mask))
    return total, stats


def length_batches(
    rollouts: Sequence[Rollout], batch_size: int, generator: torch.Generator
) -> Iterator[list[Rollout]]:
    """Endless batches of similar-length rollouts (little padding), reshuffled every epoch."""
    while True:
        order = torch.randperm(len(rollouts), generator=generator).tolist()
        chunk = batch_size * 8
        batches: list[list[Rollout]] = []
        for i in range(0, len(order), chunk):
            group = sorted(order[i : i + chunk], key=lambda k: len(rollouts[k].ids))
            batches += [
                [rollouts[k] for k in group[j : j + batch_size]]
                for j in range(0, len(group), batch_size)
            ]
        for k in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[k]


def lr_at(step: int, schedule: Schedule) -> float:
    """Linear warm-up, then cosine decay to final_lr_fraction of the peak."""
    if step < schedule.warmup_steps:
        return schedule.lr * (step + 1) / schedule.warmup_steps
    progress = (step - schedule.warmup_steps) / max(1, schedule.steps - schedule.warmup_steps)
    floor = schedule.final_lr_fraction
    return schedule.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train_drafter(
    drafter: Eagle3Drafter,
    target: LlamaForCausalLM,
    rollouts: Sequence[Rollout],
    spec: DrafterSpec,
    schedule: Schedule,
    *,
    pad_id: int,
    seed: int,
    desc: str,
    features: TargetFeatures | None = None,
) -> TrainLog:
    """AdamW (betas 0.9/0.95, no weight decay, clip 0.5) on the TTT loss, in place.

    Pass the build's shared `features` to reuse target features across drafters."""
    target.requires_grad_(False)
    aux = drafter.cfg.aux_layers
    assert aux is not None, "drafter config must record its aux layers"
    if features is None:
        features = TargetFeatures(target, aux, pad_id)
    assert features.target is target and features.aux_layers == aux, "features of another target"
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=schedule.lr, betas=(0.9, 0.95), weight_decay=0.0)
    batches = length_batches(rollouts, spec.batch_size, torch.Generator().manual_seed(seed))
    log, window = TrainLog(), []
    drafter.train()
    bar = tqdm(range(schedule.steps), desc=desc, unit="step")
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, schedule)
        ids, lengths, prompt_lengths, fused, logits = features.batch(next(batches))
        resp = response_mask(lengths, prompt_lengths, ids.shape[1])
        loss, stats = ttt_unroll(drafter, fused, ids, logits, resp, spec, pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
        opt.step()
        log.losses.append(loss.item())
        window.append(stats)
        if (step + 1) % 25 == 0 or step + 1 == schedule.steps:
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
